/* A PDF page's objects and characters (extract/pdf.py `_page_objects`, `_lines`), compiled: the objects,
   their kinds and the text objects' matrices, the characters' code points and loose boxes read from
   PDFium in one C loop each, the line grouping of the glyphs and the lines' boxes.

   The oracles are extract/pdf.py `page_objects_python`, `char_codes_python`, `visible_glyphs_python`,
   `group_chars_python` and `line_boxes_python`;
   tests/test_pdf_compiled.py checks that each pair gives the same lists on random glyph streams and
   real PDFs. In the grouping the arithmetic is the oracle's, in the same order on doubles (Python's
   floats), and min/max keep the first of equal values as Python's do, so every comparison comes out
   the same, NaN included. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <math.h>
#include <stdlib.h>

#define PY_MIN(a, b) ((b) < (a) ? (b) : (a)) /* Python's min(a, b): a unless b is smaller */
#define PY_MAX(a, b) ((b) > (a) ? (b) : (a))

enum { NO_BREAK = 0, LINE = 1, GAP = 2 };

/* extract/pdf.py `_breaks_line` */
static int breaks_line(double fy0, double fy1, double last_x0, double last_x1, double a0, double a1, double a3,
                       double split_gap) {
    double h = fy1 - fy0;
    double overlap = PY_MIN(fy1, a3) - PY_MAX(fy0, a1);
    if (overlap < 0.5 * PY_MIN(h, a3 - a1) || a0 < last_x0 - 0.5 * h) return LINE;
    return a0 - last_x1 > split_gap * h ? GAP : NO_BREAK;
}

static double *doubles(PyObject *list, Py_ssize_t n) {
    double *out = malloc((n + 1) * sizeof(double));
    if (!out) { PyErr_NoMemory(); return NULL; }
    for (Py_ssize_t i = 0; i < n; i++) {
        out[i] = PyFloat_AsDouble(PyList_GET_ITEM(list, i));
        if (out[i] == -1.0 && PyErr_Occurred()) { free(out); return NULL; }
    }
    return out;
}

static long long *integers(PyObject *list, Py_ssize_t n) {
    long long *out = malloc((n + 1) * sizeof(long long));
    if (!out) { PyErr_NoMemory(); return NULL; }
    for (Py_ssize_t i = 0; i < n; i++) {
        out[i] = PyLong_AsLongLong(PyList_GET_ITEM(list, i));
        if (out[i] == -1 && PyErr_Occurred()) { free(out); return NULL; }
    }
    return out;
}

static int append_index(PyObject *list, Py_ssize_t i) {
    PyObject *v = PyLong_FromSsize_t(i);
    int rc = v ? PyList_Append(list, v) : -1;
    Py_XDECREF(v);
    return rc;
}

static PyObject *group_chars(PyObject *self, PyObject *args) {
    PyObject *lists[6];
    long long newline_weight;
    double split_gap, continue_gap, space_gap;
    if (!PyArg_ParseTuple(args, "O!O!O!O!O!O!Lddd", &PyList_Type, &lists[0], &PyList_Type, &lists[1],
                          &PyList_Type, &lists[2], &PyList_Type, &lists[3], &PyList_Type, &lists[4],
                          &PyList_Type, &lists[5], &newline_weight, &split_gap, &continue_gap, &space_gap))
        return NULL;
    if (newline_weight <= 0) {
        PyErr_SetString(PyExc_ValueError, "newline_weight must be > 0");
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(lists[0]); /* zip(): the shortest list */
    for (int k = 1; k < 6; k++)
        if (PyList_GET_SIZE(lists[k]) < n) n = PyList_GET_SIZE(lists[k]);
    double *f[4] = {NULL, NULL, NULL, NULL};
    long long *quarters = NULL, *steps = NULL;
    PyObject *starts = PyList_New(0), *gap_splits = PyList_New(0), *spaced = PyList_New(0), *result = NULL;
    if (!starts || !gap_splits || !spaced) goto done;
    for (int k = 0; k < 4; k++)
        if (!(f[k] = doubles(lists[k], n))) goto done;
    if (!(quarters = integers(lists[4], n)) || !(steps = integers(lists[5], n))) goto done;

    double fy0 = 0.0, fy1 = 0.0, last_x0 = 0.0, last_x1 = 0.0, back = 0.0, gutter = 0.0;
    long long line_q = -1;
    for (Py_ssize_t i = 0; i < n; i++) {
        double a0 = f[0][i], a1 = f[1][i], a2 = f[2][i], a3 = f[3][i];
        long long q = quarters[i], step = steps[i];
        if (step < newline_weight && q == line_q && fy0 <= a1 && a3 <= fy1 && a1 < a3
            && a0 >= last_x0 - back && !(a0 - last_x1 > gutter)) { /* the short path (see the oracle) */
            if (step && append_index(spaced, i) < 0) goto done;
            last_x0 = a0; last_x1 = a2;
            continue;
        }
        int newline = step >= newline_weight;
        long long rem = step % newline_weight; /* Python's %: the sign of the divisor */
        if (rem < 0) rem += newline_weight;
        int space = rem > 0;
        double h = fy1 - fy0;
        int brk = line_q < 0 ? NO_BREAK : q != line_q ? LINE
                                                      : breaks_line(fy0, fy1, last_x0, last_x1, a0, a1, a3, split_gap);
        if (newline) {
            double gap = a0 - last_x1;
            if (brk != NO_BREAK || gap > continue_gap * h) brk = LINE;
            else space = gap > space_gap * h;
        }
        if (brk != NO_BREAK || line_q < 0) {
            if (append_index(starts, i) < 0 || PyList_Append(gap_splits, brk == GAP ? Py_True : Py_False) < 0)
                goto done;
            fy0 = a1; fy1 = a3; line_q = q;
        } else {
            if (space && append_index(spaced, i) < 0) goto done;
            fy0 = PY_MIN(fy0, a1); fy1 = PY_MAX(fy1, a3);
        }
        h = fy1 - fy0;
        back = 0.5 * h; gutter = split_gap * h;
        last_x0 = a0; last_x1 = a2;
    }
    result = PyTuple_Pack(3, starts, gap_splits, spaced);
done:
    for (int k = 0; k < 4; k++) free(f[k]);
    free(quarters); free(steps);
    Py_XDECREF(starts); Py_XDECREF(gap_splits); Py_XDECREF(spaced);
    return result;
}

/* PDFium's functions, called through the addresses pypdfium2's library has them at (the caller passes
   them: ctypes.cast(pypdfium2.raw.FPDFText_GetUnicode, c_void_p).value), so nothing here links to PDFium. */
typedef unsigned int (*get_unicode_fn)(void *text_page, int index);
typedef int (*get_loose_box_fn)(void *text_page, int index, float *rect); /* FS_RECTF: left, top, right, bottom */

/* char_codes(text_page, n, FPDFText_GetUnicode's address): extract/pdf.py char_codes_python */
static PyObject *char_codes(PyObject *self, PyObject *args) {
    unsigned long long page, fn;
    int n;
    if (!PyArg_ParseTuple(args, "KiK", &page, &n, &fn)) return NULL;
    if (!page || !fn) { PyErr_SetString(PyExc_ValueError, "null text page or function"); return NULL; }
    get_unicode_fn get = (get_unicode_fn)(uintptr_t)fn;
    PyObject *out = PyList_New(n > 0 ? n : 0);
    if (!out) return NULL;
    for (int i = 0; i < n; i++) {
        PyObject *code = PyLong_FromUnsignedLong(get((void *)(uintptr_t)page, i));
        if (!code) { Py_DECREF(out); return NULL; }
        PyList_SET_ITEM(out, i, code);
    }
    return out;
}

/* visible_glyphs(text_page, indices, (x0, y0, x1, y1), FPDFText_GetLooseCharBox's address):
   extract/pdf.py visible_glyphs_python */
static PyObject *visible_glyphs(PyObject *self, PyObject *args) {
    unsigned long long page, fn;
    PyObject *indices;
    double x0, y0, x1, y1;
    if (!PyArg_ParseTuple(args, "KO!(dddd)K", &page, &PyList_Type, &indices, &x0, &y0, &x1, &y1, &fn)) return NULL;
    if (!page || !fn) { PyErr_SetString(PyExc_ValueError, "null text page or function"); return NULL; }
    get_loose_box_fn get = (get_loose_box_fn)(uintptr_t)fn;
    Py_ssize_t n = PyList_GET_SIZE(indices);
    PyObject *lists[5] = {PyList_New(0), PyList_New(0), PyList_New(0), PyList_New(0), PyList_New(0)};
    for (int k = 0; k < 5; k++)
        if (!lists[k]) goto fail;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *index = PyList_GET_ITEM(indices, i);
        long at = PyLong_AsLong(index);
        if (at == -1 && PyErr_Occurred()) goto fail;
        float rect[4] = {0.0f, 0.0f, 0.0f, 0.0f}; /* left, top, right, bottom; ctypes' zeroed FS_RECTF */
        if (!get((void *)(uintptr_t)page, (int)at, rect)) continue;
        double l = rect[0], t = rect[1], r = rect[2], b = rect[3];
        double cx = (l + r) / 2, cy = (b + t) / 2;
        if (!(x0 <= cx && cx <= x1 && y0 <= cy && cy <= y1)) continue;
        if (PyList_Append(lists[0], index) < 0) goto fail;
        double values[4] = {l, b, r, t};
        for (int k = 0; k < 4; k++) {
            PyObject *v = PyFloat_FromDouble(values[k]);
            int rc = v ? PyList_Append(lists[k + 1], v) : -1;
            Py_XDECREF(v);
            if (rc < 0) goto fail;
        }
    }
    return Py_BuildValue("(NNNNN)", lists[0], lists[1], lists[2], lists[3], lists[4]);
fail:
    for (int k = 0; k < 5; k++) Py_XDECREF(lists[k]);
    return NULL;
}

typedef int (*count_fn)(void *parent);
typedef void *(*page_get_fn)(void *page, int index);
typedef void *(*form_get_fn)(void *form, unsigned long index);
typedef int (*type_fn)(void *object);
typedef int (*matrix_fn)(void *object, float *matrix); /* FS_MATRIX: a, b, c, d, e, f */

/* page_objects(parent, is_form, (m0, m1, m2, m3), check_upright, upright_tan, the text kind, the addresses
   of the count, get, type and matrix functions): extract/pdf.py page_objects_python, or PdfiumError's
   message (a str) where PDFium fails. */
static PyObject *page_objects(PyObject *self, PyObject *args) {
    unsigned long long parent, count_at, get_at, type_at, matrix_at;
    int form, check, text_kind;
    double m0, m1, m2, m3, upright_tan;
    if (!PyArg_ParseTuple(args, "Kp(dddd)pdiKKKK", &parent, &form, &m0, &m1, &m2, &m3, &check, &upright_tan,
                          &text_kind, &count_at, &get_at, &type_at, &matrix_at))
        return NULL;
    if (!parent || !count_at || !get_at || !type_at || !matrix_at) {
        PyErr_SetString(PyExc_ValueError, "null parent or function");
        return NULL;
    }
    void *p = (void *)(uintptr_t)parent;
    int n = ((count_fn)(uintptr_t)count_at)(p);
    if (n < 0) return PyUnicode_FromString("Failed to get number of pageobjects.");
    PyObject *objects = PyList_New(n), *kinds = PyList_New(n);
    void **handles = malloc((n + 1) * sizeof(void *));
    int *types = malloc((n + 1) * sizeof(int));
    PyObject *result = NULL;
    if (!objects || !kinds || !handles || !types) { PyErr_NoMemory(); goto done; }
    for (int i = 0; i < n; i++) {
        handles[i] = form ? ((form_get_fn)(uintptr_t)get_at)(p, (unsigned long)i) : ((page_get_fn)(uintptr_t)get_at)(p, i);
        if (!handles[i]) { result = PyUnicode_FromString("Failed to get pageobject."); goto done; }
    }
    for (int i = 0; i < n; i++) {
        types[i] = ((type_fn)(uintptr_t)type_at)(handles[i]);
        PyObject *address = PyLong_FromVoidPtr(handles[i]), *kind = PyLong_FromLong(types[i]);
        if (!address || !kind) { Py_XDECREF(address); Py_XDECREF(kind); goto done; }
        PyList_SET_ITEM(objects, i, address);
        PyList_SET_ITEM(kinds, i, kind);
    }
    int upright = 1;
    if (check) { /* extract/pdf.py _upright: every matrix first (one failure: not upright), then the angles */
        float *values = malloc((size_t)(n + 1) * 6 * sizeof(float));
        int texts = 0;
        if (!values) { PyErr_NoMemory(); goto done; }
        for (int i = 0; i < n && upright; i++) {
            if (types[i] != text_kind) continue;
            if (!((matrix_fn)(uintptr_t)matrix_at)(handles[i], values + 6 * texts)) upright = 0;
            texts++;
        }
        for (int t = 0; t < texts && upright; t++) {
            double a = values[6 * t], b = values[6 * t + 1];
            double x = a * m0 + b * m2;
            if (!(x > 0 && fabs(a * m1 + b * m3) <= upright_tan * x)) upright = 0;
        }
        free(values);
    }
    result = Py_BuildValue("(OON)", objects, kinds, PyBool_FromLong(upright));
done:
    Py_XDECREF(objects); Py_XDECREF(kinds);
    free(handles); free(types);
    return result;
}

/* line_boxes(x0s, y0s, x1s, y1s, starts, m): extract/pdf.py line_boxes_python */
static PyObject *line_boxes(PyObject *self, PyObject *args) {
    PyObject *lists[4], *starts;
    Py_ssize_t m;
    if (!PyArg_ParseTuple(args, "O!O!O!O!O!n", &PyList_Type, &lists[0], &PyList_Type, &lists[1], &PyList_Type,
                          &lists[2], &PyList_Type, &lists[3], &PyList_Type, &starts, &m))
        return NULL;
    Py_ssize_t lines = PyList_GET_SIZE(starts);
    for (int k = 0; k < 4; k++)
        if (PyList_GET_SIZE(lists[k]) < m) {
            PyErr_SetString(PyExc_ValueError, "fewer values than glyphs");
            return NULL;
        }
    PyObject *out = PyList_New(lines);
    if (!out) return NULL;
    for (Py_ssize_t k = 0; k < lines; k++) {
        Py_ssize_t s = PyLong_AsSsize_t(PyList_GET_ITEM(starts, k));
        Py_ssize_t e = k + 1 < lines ? PyLong_AsSsize_t(PyList_GET_ITEM(starts, k + 1)) : m;
        if (PyErr_Occurred()) goto fail;
        if (s < 0 || e > m || s >= e) {
            PyErr_SetString(PyExc_ValueError, "line starts must rise within the glyphs");
            goto fail;
        }
        PyObject *extremes[4]; /* the objects themselves, as min() and max() return them */
        for (int j = 0; j < 4; j++) {
            extremes[j] = PyList_GET_ITEM(lists[j], s);
            double best = PyFloat_AsDouble(extremes[j]);
            for (Py_ssize_t i = s + 1; i < e; i++) {
                PyObject *item = PyList_GET_ITEM(lists[j], i);
                double v = PyFloat_AsDouble(item);
                if (j < 2 ? v < best : v > best) { best = v; extremes[j] = item; }
            }
            if (PyErr_Occurred()) goto fail;
        }
        PyObject *box = PyList_New(4);
        if (!box) goto fail;
        for (int j = 0; j < 4; j++) {
            Py_INCREF(extremes[j]);
            PyList_SET_ITEM(box, j, extremes[j]);
        }
        PyList_SET_ITEM(out, k, box);
    }
    return out;
fail:
    Py_DECREF(out);
    return NULL;
}

static PyMethodDef methods[] = {
    {"char_codes", char_codes, METH_VARARGS,
     "char_codes(text_page, n, address of FPDFText_GetUnicode) -> the code points of the first n characters"},
    {"line_boxes", line_boxes, METH_VARARGS,
     "line_boxes(x0s, y0s, x1s, y1s, starts, m) -> per line [min x0, min y0, max x1, max y1]"},
    {"page_objects", page_objects, METH_VARARGS,
     "page_objects(parent, is_form, (m0, m1, m2, m3), check_upright, upright_tan, text kind, addresses of the "
     "count, get, type and matrix functions) -> (object addresses, kinds, texts upright) or PdfiumError's message"},
    {"visible_glyphs", visible_glyphs, METH_VARARGS,
     "visible_glyphs(text_page, indices, (x0, y0, x1, y1), address of FPDFText_GetLooseCharBox) -> (indices, "
     "lefts, bottoms, rights, tops) of the glyphs with a box whose centre is visible"},
    {"group_chars", group_chars, METH_VARARGS,
     "group_chars(f0, f1, f2, f3, quarters, steps, newline_weight, split_gap, continue_gap, space_gap) -> "
     "(line starts, gap splits, spaced glyphs): extract/pdf.py group_chars_python, compiled"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_pdflines",
                                    "The line grouping of a PDF page's glyphs, compiled.", -1, methods};

PyMODINIT_FUNC PyInit__pdflines(void) { return PyModule_Create(&module); }
