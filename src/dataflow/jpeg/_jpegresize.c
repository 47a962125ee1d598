/*
 * The resize half of dataflow.jpeg._jpeg: a bilinear uint8 resize that computes exactly what
 * cv2.resize(src, (new_w, new_h), interpolation=cv2.INTER_LINEAR) computes (the same 11-bit
 * fixed-point weights and the same rounding), for any window of the resized image and from any
 * window of the source that holds the pixels it needs, mirrored (by reversing the columns it
 * reads) and passed through a per-channel saturating offset or lookup table as each output row
 * is stored. Used by dataflow.imgaug.fused to go from a
 * decoded JPEG region straight to the augmented output in one pass.
 *
 * Geometry, per axis (as cv2.resize): output pixel i of the window maps to the source
 * coordinate f = (float)((i + start + 0.5) * scale - 0.5 + shift), in a source frame of
 * `length` pixels where coordinates are clamped to the frame's edges; the buffer passed in holds
 * the frame's pixels from `origin` on. cv2.resize itself is start = shift = origin = 0 and
 * scale = 1 / (new / length). A resize by exactly 1/2 on both axes is a 2x2 average, as in
 * cv2.resize (which switches to INTER_AREA there).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "_jpeg.h"

#define COEF_BITS 11
#define COEF_ONE (1 << COEF_BITS)


static short coef(float v) { return (short)lrintf(v * COEF_ONE); }

static Py_ssize_t clip(Py_ssize_t v, Py_ssize_t hi) { return v < 0 ? 0 : (v > hi ? hi : v); }

/* The two source indices (in the buffer) and weights of each output pixel along one axis, as
   cv2.resize computes them: a column outside the frame takes the edge column at full weight; a
   row outside takes the edge row for both terms, with the weights of the unclamped position. */
static int plan_axis(const Axis *ax, Py_ssize_t count, Py_ssize_t available, int is_x, int *i0,
                     int *i1, short *w0, short *w1) {
    Py_ssize_t i, last = ax->length - 1;
    for (i = 0; i < count; i++) {
        float f = (float)((i + ax->start + 0.5) * ax->scale - 0.5 + ax->shift);
        Py_ssize_t s = (Py_ssize_t)floorf(f), s0, s1;
        f -= (float)s;
        if (is_x) {
            if (s < 0) {
                s = 0;
                f = 0.f;
            }
            if (s >= last) {
                s = last;
                f = 0.f;
            }
            s0 = s;
            s1 = s < last ? s + 1 : s;
        } else {
            s0 = clip(s, last);
            s1 = clip(s + 1, last);
        }
        i0[i] = (int)(s0 - ax->origin);
        i1[i] = (int)(s1 - ax->origin);
        w0[i] = coef(1.f - f);
        w1[i] = coef(f);
        if (i0[i] < 0 || i1[i] < 0 || i0[i] >= available || i1[i] >= available) {
            return -1;
        }
    }
    return 0;
}

#if defined(__GNUC__) && defined(__x86_64__) && defined(__GLIBC__)
#define HOT __attribute__((target_clones("avx2", "default")))
#else
#define HOT
#endif

#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#include <immintrin.h>
#define HAVE_SSSE3_PATH 1

/* The 3-channel horizontal pass with SIMD, for the pixels [lo, hi) whose 8 bytes from their
   first source pixel lie inside the row: one 8-byte load holds the pixel and the next one, a
   shuffle pairs their channels, one multiply-add of 16-bit pairs (weights packed as
   a0 | a1 << 16) gives the three sums. The next pixel is read even where cv2 uses only one (its
   weight is then 0). Each store writes one short past the pixel, which the next pixel's store
   (or the row's spare short) absorbs. `off` holds the byte offsets 3 * x0. */
__attribute__((target("ssse3"))) static void horizontal3_ssse3(const unsigned char *src,
                                                                 Py_ssize_t lo, Py_ssize_t hi,
                                                                 const int *off,
                                                                 const int *wpair, short *row) {
    const __m128i pairs = _mm_setr_epi8(0, -1, 3, -1, 1, -1, 4, -1, 2, -1, 5, -1, -1, -1, -1, -1);
    Py_ssize_t i;
    for (i = lo; i < hi; i++) {
        __m128i v = _mm_loadl_epi64((const __m128i *)(src + off[i]));
        __m128i d = _mm_madd_epi16(_mm_shuffle_epi8(v, pairs), _mm_set1_epi32(wpair[i]));
        d = _mm_srai_epi32(d, 4);
        _mm_storel_epi64((__m128i *)(row + 3 * i), _mm_packs_epi32(d, d));
    }
}

/* The same, two pixels per 256-bit multiply-add (AVX2). */
__attribute__((target("avx2"))) static void horizontal3_avx2(const unsigned char *src,
                                                               Py_ssize_t lo, Py_ssize_t hi,
                                                               const int *off, const int *wpair,
                                                               short *row) {
    const __m256i pairs = _mm256_setr_epi8(0, -1, 3, -1, 1, -1, 4, -1, 2, -1, 5, -1, -1, -1, -1,
                                           -1, 0, -1, 3, -1, 1, -1, 4, -1, 2, -1, 5, -1, -1, -1,
                                           -1, -1);
    Py_ssize_t i = lo;
    for (; i + 2 <= hi; i += 2) {
        __m128i a = _mm_loadl_epi64((const __m128i *)(src + off[i]));
        __m128i b = _mm_loadl_epi64((const __m128i *)(src + off[i + 1]));
        __m256i v = _mm256_inserti128_si256(_mm256_castsi128_si256(a), b, 1);
        __m256i w = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_set1_epi32(wpair[i])),
                                            _mm_set1_epi32(wpair[i + 1]), 1);
        __m256i d = _mm256_srai_epi32(_mm256_madd_epi16(_mm256_shuffle_epi8(v, pairs), w), 4);
        d = _mm256_packs_epi32(d, d);
        _mm_storel_epi64((__m128i *)(row + 3 * i), _mm256_castsi256_si128(d));
        _mm_storel_epi64((__m128i *)(row + 3 * i + 3), _mm256_extracti128_si256(d, 1));
    }
    horizontal3_ssse3(src, i, hi, off, wpair, row);
}
#endif

static int simd = 0; /* 1: the CPU runs SSSE3, 2: AVX2 too (checked once, see resize_init) */

/* The x plan in the form the SIMD pass reads: byte offsets, packed weights, and the range of
   pixels whose 8-byte load stays inside the row (x0 is monotonic, so the others are at the
   ends). */
typedef struct {
    int *off, *wpair;
    Py_ssize_t lo, hi;
} Packed;

/* One source row, resampled horizontally into `row`: 2048 times the value, shifted right by 4
   as cv2 does before the vertical blend (so it fits 16 bits). */
HOT static void horizontal(const unsigned char *src, int cn, Py_ssize_t count, const int *x0,
                           const int *x1, const short *a0, const short *a1, const Packed *pk,
                           short *row) {
    Py_ssize_t i;
    int k;
    if (cn == 3) {
        Py_ssize_t lo = 0, hi = 0;
#ifdef HAVE_SSSE3_PATH
        if (pk != NULL) {
            lo = pk->lo;
            hi = pk->hi;
            if (simd >= 2) {
                horizontal3_avx2(src, lo, hi, pk->off, pk->wpair, row);
            } else {
                horizontal3_ssse3(src, lo, hi, pk->off, pk->wpair, row);
            }
        }
#endif
        for (i = 0; i < count; i++) {
            const unsigned char *p, *q;
            int b0, b1;
            short *d;
            if (i == lo && hi > lo) { /* done by the SIMD pass */
                i = hi - 1;
                continue;
            }
            p = src + 3 * x0[i];
            q = src + 3 * x1[i];
            b0 = a0[i];
            b1 = a1[i];
            d = row + 3 * i;
            d[0] = (short)((p[0] * b0 + q[0] * b1) >> 4);
            d[1] = (short)((p[1] * b0 + q[1] * b1) >> 4);
            d[2] = (short)((p[2] * b0 + q[2] * b1) >> 4);
        }
        return;
    }
    for (i = 0; i < count; i++) {
        const unsigned char *p = src + cn * x0[i], *q = src + cn * x1[i];
        for (k = 0; k < cn; k++) {
            row[cn * i + k] = (short)((p[k] * a0[i] + q[k] * a1[i]) >> 4);
        }
    }
}

static void store(const ResizeJob *job, Py_ssize_t y, Py_ssize_t x, int k, int v) {
    unsigned char *d = job->dst + (job->flip_v ? job->out_h - 1 - y : y) * job->dst_stride +
                       (job->flip_h ? job->out_w - 1 - x : x) * job->cn + k;
    if (job->use_add) {
        v += job->add[k];
        v = v < 0 ? 0 : (v > 255 ? 255 : v);
    }
    *d = job->lut != NULL ? job->lut[v * job->cn + k] : (unsigned char)v;
}

/* cv2's rounding of the vertical blend of two horizontally resampled rows (the high halves of
   16-bit products, as its SIMD code computes them) */
#define BLEND(v0, v1) (((short)((w0 * (v0)) >> 16) + (short)((w1 * (v1)) >> 16) + 2) >> 2)

/* Blend two resampled rows into uint8 values (SSE2 is part of x86-64: no dispatch needed). */
static void blend_row(const short *r0, const short *r1, short w0, short w1, Py_ssize_t n,
                      unsigned char *out) {
    Py_ssize_t i = 0;
#if defined(__SSE2__)
    const __m128i v0 = _mm_set1_epi16(w0), v1 = _mm_set1_epi16(w1), two = _mm_set1_epi16(2);
    for (; i + 16 <= n; i += 16) {
        __m128i a = _mm_add_epi16(_mm_mulhi_epi16(v0, _mm_loadu_si128((const __m128i *)(r0 + i))),
                                  _mm_mulhi_epi16(v1, _mm_loadu_si128((const __m128i *)(r1 + i))));
        __m128i b = _mm_add_epi16(
            _mm_mulhi_epi16(v0, _mm_loadu_si128((const __m128i *)(r0 + i + 8))),
            _mm_mulhi_epi16(v1, _mm_loadu_si128((const __m128i *)(r1 + i + 8))));
        a = _mm_srai_epi16(_mm_add_epi16(a, two), 2);
        b = _mm_srai_epi16(_mm_add_epi16(b, two), 2);
        _mm_storeu_si128((__m128i *)(out + i), _mm_packus_epi16(a, b));
    }
#endif
    for (; i < n; i++) {
        out[i] = (unsigned char)BLEND(r0[i], r1[i]);
    }
}

/* Add add[i % 3] to each byte of a 3-channel row, saturated: SSE2 saturating adds and
   subtracts of the channel pattern, which repeats every 48 bytes (three vectors). */
static void offset_row3(unsigned char *row, Py_ssize_t n, const int *add) {
    Py_ssize_t i = 0;
#if defined(__SSE2__)
    unsigned char up[48], down[48];
    __m128i u[3], d[3];
    int j;
    for (j = 0; j < 48; j++) {
        int k = add[j % 3];
        up[j] = (unsigned char)(k > 0 ? k : 0);
        down[j] = (unsigned char)(k < 0 ? -k : 0);
    }
    for (j = 0; j < 3; j++) {
        u[j] = _mm_loadu_si128((const __m128i *)(up + 16 * j));
        d[j] = _mm_loadu_si128((const __m128i *)(down + 16 * j));
    }
    for (; i + 48 <= n; i += 48) {
        for (j = 0; j < 3; j++) {
            __m128i *p = (__m128i *)(row + i + 16 * j);
            _mm_storeu_si128(p, _mm_subs_epu8(_mm_adds_epu8(_mm_loadu_si128(p), u[j]), d[j]));
        }
    }
#endif
    for (; i < n; i++) {
        int v = row[i] + add[i % 3];
        row[i] = (unsigned char)(v < 0 ? 0 : (v > 255 ? 255 : v));
    }
}

/* Output row y from the two resampled rows (already mirrored if flip_h: the columns were
   read in reverse): blended, offset or looked up, stored. */
static void vertical(const ResizeJob *job, Py_ssize_t y, const short *r0, const short *r1,
                     short w0, short w1) {
    Py_ssize_t n = job->out_w * job->cn, i;
    int cn = job->cn;
    unsigned char *row = job->dst + (job->flip_v ? job->out_h - 1 - y : y) * job->dst_stride;
    blend_row(r0, r1, w0, w1, n, row);
    if (job->use_add) {
        if (cn == 3) {
            offset_row3(row, n, job->add);
        } else {
            for (i = 0; i < n; i++) {
                int v = row[i] + job->add[i % cn];
                row[i] = (unsigned char)(v < 0 ? 0 : (v > 255 ? 255 : v));
            }
        }
    } else if (job->lut != NULL) {
        const unsigned char *lut = job->lut;
        for (i = 0; i < n; i++) {
            row[i] = lut[row[i] * cn + i % cn];
        }
    }
}

static int run_half(const ResizeJob *job) {
    Py_ssize_t y, x;
    int k, cn = job->cn;
    Py_ssize_t x0 = 2 * job->ax.start - job->ax.origin, y0 = 2 * job->ay.start - job->ay.origin;
    if (x0 < 0 || y0 < 0 || x0 + 2 * job->out_w > job->src_w || y0 + 2 * job->out_h > job->src_h) {
        return -1;
    }
    for (y = 0; y < job->out_h; y++) {
        const unsigned char *r0 = job->src + (y0 + 2 * y) * job->src_stride + x0 * cn;
        const unsigned char *r1 = r0 + job->src_stride;
        for (x = 0; x < job->out_w; x++) {
            for (k = 0; k < cn; k++) {
                int s = r0[2 * x * cn + k] + r0[(2 * x + 1) * cn + k] + r1[2 * x * cn + k] +
                        r1[(2 * x + 1) * cn + k];
                store(job, y, x, k, (s + 2) >> 2);
            }
        }
    }
    return 0;
}

/* Runs without the GIL. Returns 0, -1 (a window the buffer does not hold) or -2 (memory). */
int run_resize(const ResizeJob *job) {
    Py_ssize_t n = job->out_w, m = job->out_h, y;
    int cn = job->cn, j, rc = 0;
    int *x0 = NULL, *x1 = NULL, *y0 = NULL, *y1 = NULL;
    short *rows = NULL;
    int *off = NULL, *wpair = NULL;
    Packed pk;
    short *a0 = NULL, *a1 = NULL, *b0 = NULL, *b1 = NULL;
    Py_ssize_t cached[2] = {-1, -1};

    if (job->half) {
        return run_half(job);
    }
    x0 = malloc(n * sizeof(int));
    x1 = malloc(n * sizeof(int));
    a0 = malloc(n * sizeof(short));
    a1 = malloc(n * sizeof(short));
    y0 = malloc(m * sizeof(int));
    y1 = malloc(m * sizeof(int));
    b0 = malloc(m * sizeof(short));
    b1 = malloc(m * sizeof(short));
    rows = malloc(2 * (n * cn + 4) * sizeof(short)); /* + spare shorts for the SIMD stores */
    if (!x0 || !x1 || !a0 || !a1 || !y0 || !y1 || !b0 || !b1 || !rows) {
        rc = -2;
        goto done;
    }
    if (plan_axis(&job->ax, n, job->src_w, 1, x0, x1, a0, a1) < 0 ||
        plan_axis(&job->ay, m, job->src_h, 0, y0, y1, b0, b1) < 0) {
        rc = -1;
        goto done;
    }
    if (job->flip_h) { /* output column i is column n - 1 - i of the unmirrored resize */
        Py_ssize_t i;
        for (i = 0; i < n / 2; i++) {
            int t;
            short u;
            t = x0[i], x0[i] = x0[n - 1 - i], x0[n - 1 - i] = t;
            t = x1[i], x1[i] = x1[n - 1 - i], x1[n - 1 - i] = t;
            u = a0[i], a0[i] = a0[n - 1 - i], a0[n - 1 - i] = u;
            u = a1[i], a1[i] = a1[n - 1 - i], a1[n - 1 - i] = u;
        }
    }
    if (cn == 3 && simd) {
        Py_ssize_t i;
        off = malloc(n * sizeof(int));
        wpair = malloc(n * sizeof(int));
        if (!off || !wpair) {
            rc = -2;
            goto done;
        }
        pk.off = off;
        pk.wpair = wpair;
        pk.lo = 0;
        pk.hi = 0;
        for (i = 0; i < n; i++) {
            off[i] = 3 * x0[i];
            wpair[i] = (int)(unsigned short)a0[i] | ((int)a1[i] << 16);
            /* the 8-byte loads that stay in the row: one run, as x0 is monotonic */
            if (3 * (Py_ssize_t)x0[i] + 8 <= 3 * job->src_w) {
                if (pk.hi == pk.lo) {
                    pk.lo = i;
                }
                pk.hi = i + 1;
            }
        }
    }
    for (y = 0; y < m; y++) {
        Py_ssize_t want[2];
        const short *r[2];
        want[0] = y0[y];
        want[1] = y1[y];
        for (j = 0; j < 2; j++) {
            int slot;
            if (cached[0] == want[j]) {
                slot = 0;
            } else if (cached[1] == want[j]) {
                slot = 1;
            } else {
                /* never overwrite the slot holding the other row this output row needs */
                if (j == 0) {
                    slot = cached[0] == want[1] ? 1 : 0;
                } else {
                    slot = r[0] == rows ? 1 : 0; /* slot 0 starts at rows */
                }
                horizontal(job->src + want[j] * job->src_stride, cn, n, x0, x1, a0, a1,
                           off != NULL ? &pk : NULL, rows + slot * (n * cn + 4));
                cached[slot] = want[j];
            }
            r[j] = rows + slot * (n * cn + 4);
        }
        vertical(job, y, r[0], r[1], b0[y], b1[y]);
    }
done:
    free(x0);
    free(x1);
    free(a0);
    free(a1);
    free(y0);
    free(y1);
    free(b0);
    free(b1);
    free(rows);
    free(off);
    free(wpair);
    return rc;
}

int resize_job_from(ResizeJob *job, PyObject *ax, PyObject *ay, PyObject *add) {
    if (!PyArg_ParseTuple(ax, "ddnnn", &job->ax.scale, &job->ax.shift, &job->ax.start,
                          &job->ax.length, &job->ax.origin) ||
        !PyArg_ParseTuple(ay, "ddnnn", &job->ay.scale, &job->ay.shift, &job->ay.start,
                          &job->ay.length, &job->ay.origin)) {
        return -1;
    }
    if (job->ax.length < 1 || job->ay.length < 1) {
        PyErr_SetString(PyExc_ValueError, "an axis needs a frame of at least one pixel");
        return -1;
    }
    if (add != Py_None) {
        Py_ssize_t k, len = PyTuple_Check(add) ? PyTuple_GET_SIZE(add) : -1;
        if (len < 1 || len > 4) {
            PyErr_SetString(PyExc_ValueError, "add must be None or a tuple of 1 to 4 ints");
            return -1;
        }
        for (k = 0; k < len; k++) {
            long v = PyLong_AsLong(PyTuple_GET_ITEM(add, k));
            if (v == -1 && PyErr_Occurred()) {
                return -1;
            }
            job->add[k] = v < -255 ? -255 : (v > 255 ? 255 : (int)v);
        }
        job->use_add = 1;
    }
    return 0;
}

int resize_dst_from(ResizeJob *job, Py_buffer *dst, int cn, PyObject *lut_obj, Py_buffer *lut) {
    if (dst->itemsize != 1 || dst->ndim != (cn == 1 ? 2 : 3) || (cn != 1 && dst->shape[2] != cn) ||
        dst->strides[1] != cn || (cn != 1 && dst->strides[2] != 1)) {
        PyErr_SetString(PyExc_ValueError, "the output must be a uint8 (h, w[, c]) array with "
                                          "contiguous pixels and the source's channels");
        return -1;
    }
    if (job->use_add && cn > 4) {
        PyErr_SetString(PyExc_ValueError, "add needs at most 4 channels");
        return -1;
    }
    job->cn = cn;
    job->dst = (unsigned char *)dst->buf;
    job->dst_stride = dst->strides[0];
    job->out_h = dst->shape[0];
    job->out_w = dst->shape[1];
    if (lut_obj != Py_None) {
        if (PyObject_GetBuffer(lut_obj, lut, PyBUF_SIMPLE) < 0) {
            return -1;
        }
        if (lut->len != 256 * cn) {
            PyBuffer_Release(lut);
            PyErr_Format(PyExc_ValueError, "lut must hold 256 * %d bytes", cn);
            return -1;
        }
        job->lut = (const unsigned char *)lut->buf;
    }
    return 0;
}

int resize_error(int rc) {
    if (rc == -1) {
        PyErr_SetString(PyExc_ValueError, "the source buffer does not hold the pixels needed");
    } else if (rc == -2) {
        PyErr_NoMemory();
    }
    return rc;
}

/* resize(src, dst, x_axis, y_axis, flip_h, flip_v, lut, add, half) -> None; each axis is the
   tuple (scale, shift, start, length, origin); lut: None or 256 * c bytes; add: None or a tuple
   of c ints (a per-channel saturating offset). */
PyObject *jpeg_resize(PyObject *self, PyObject *args) {
    PyObject *src_obj, *dst_obj, *ax, *ay, *lut_obj, *add_obj;
    Py_buffer src, dst, lut;
    ResizeJob job;
    int rc, cn;

    memset(&job, 0, sizeof(job));
    if (!PyArg_ParseTuple(args, "OOOOppOOp", &src_obj, &dst_obj, &ax, &ay, &job.flip_h,
                          &job.flip_v, &lut_obj, &add_obj, &job.half) ||
        resize_job_from(&job, ax, ay, add_obj) < 0) {
        return NULL;
    }
    if (PyObject_GetBuffer(src_obj, &src, PyBUF_RECORDS_RO) < 0) {
        return NULL;
    }
    cn = src.ndim == 3 ? (int)src.shape[2] : 1;
    if (src.itemsize != 1 || src.ndim < 2 || src.ndim > 3 || src.strides[1] != cn ||
        (src.ndim == 3 && src.strides[2] != 1)) {
        PyErr_SetString(PyExc_ValueError, "the source must be a uint8 (h, w[, c]) array with "
                                          "contiguous pixels");
        PyBuffer_Release(&src);
        return NULL;
    }
    if (PyObject_GetBuffer(dst_obj, &dst, PyBUF_RECORDS) < 0) {
        PyBuffer_Release(&src);
        return NULL;
    }
    if (resize_dst_from(&job, &dst, cn, lut_obj, &lut) < 0) {
        PyBuffer_Release(&dst);
        PyBuffer_Release(&src);
        return NULL;
    }
    job.src = (const unsigned char *)src.buf;
    job.src_stride = src.strides[0];
    job.src_h = src.shape[0];
    job.src_w = src.shape[1];
    Py_BEGIN_ALLOW_THREADS
    rc = run_resize(&job);
    Py_END_ALLOW_THREADS
    if (job.lut != NULL) {
        PyBuffer_Release(&lut);
    }
    PyBuffer_Release(&dst);
    PyBuffer_Release(&src);
    if (resize_error(rc) != 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}

void resize_init(void) {
#ifdef HAVE_SSSE3_PATH
    __builtin_cpu_init();
    simd = __builtin_cpu_supports("ssse3") ? (__builtin_cpu_supports("avx2") ? 2 : 1) : 0;
#endif
}
