/* The boilerplate model's line scores, compiled.

   The oracle is filters/boilerplate.py: `line_features` and `LineModel.scores`, whose logits this gives
   bit for bit (tests/test_boilerplate_compiled.py checks it on random and real texts): the same features in
   the same order, each computed with the same double operations (Python's int / int and float / int are
   the correctly rounded divisions of the converted operands, math.log1p and math.log are libm's, sum()
   adds left to right from 0), and the score b + ((0 + w0*f0) + w1*f1) + ... with no fused multiply-adds
   (setup.py builds with -ffp-contract=off).

   line_scores(raws, lines, cols, prose, sentence, weights, bias) -> list of floats, one per non-blank line:
   `raws` the non-blank lines as the text has them, `lines` the same stripped, `cols` their widths in
   columns, `prose` and `sentence` the two per-line verdicts filters/boilerplate.py `line_classes` gives (the
   regexes stay in Python), `weights` and `bias` the model's (standardisation folded in). A line kept
   whatever it scores (the first line, a line with a sentence, an introduction, a line between two lines
   with sentences) scores inf.

   The character classes are Python's own, from the same API the regexes and str methods use: \w is
   Py_UNICODE_ISALNUM or '_', \d Py_UNICODE_ISDECIMAL, [^\W\d_] a \w that is neither, str.isupper() and
   str.islower() of one character Py_UNICODE_ISUPPER and Py_UNICODE_ISLOWER, str.isspace()
   Py_UNICODE_ISSPACE. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>

#define N_FEATURES 23
#define PROSE_DISTANCE 10 /* MAX_DISTANCE */
#define SHORT_COLS 60
#define WINDOW 3
#define INTRO_WORDS 4

static inline int is_word(Py_UCS4 c) { return Py_UNICODE_ISALNUM(c) || c == '_'; }

static int is_bullet(Py_UCS4 c) {  /* _BULLETS */
    switch (c) {
    case 0x2022: case 0x2023: case 0x25E6: case 0x25CF: case 0x25CB: case 0x25AA: case 0x25AB: case 0x25A0:
    case 0x25A1: case 0x25BA: case 0x25B6: case 0x25B8: case 0x25B9: case 0x27A2: case 0x27A4: case 0x2713:
    case 0x2714: case '-': case '*': case 0x00B7: case 0x30FB: case '>': case 0x00BB: case '|':
        return 1;
    }
    return 0;
}

static inline int is_comma(Py_UCS4 c) { return c == ',' || c == 0xFF0C || c == 0x3001; }  /* _COMMAS */

static int is_symbol(Py_UCS4 c) {  /* _SYMBOLS */
    return c == '@' || c == 0x00A9 || c == '|' || c == '#' || c == 0x00BB || c == 0x00AB || c == 0x00B7 || c == '/';
}

/* The line's own features (FEATURES[:10] of filters/boilerplate.py `_own`) into f; its \w+ runs into *words. */
static void own_features(PyObject *raw, PyObject *line, double length, Py_ssize_t repeats, double *f,
                         Py_ssize_t *words) {
    int kind = PyUnicode_KIND(line);
    const void *data = PyUnicode_DATA(line);
    Py_ssize_t n = PyUnicode_GET_LENGTH(line);
    long upper = 0, cased = 0, digits = 0, letters = 0, commas = 0, symbols = 0, spaces = 0;
    int in_word = 0;
    *words = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_UCS4 c = PyUnicode_READ(kind, data, i);
        int word = is_word(c);
        if (word && !in_word) {
            (*words)++;
            if (Py_UNICODE_ISUPPER(c)) {
                upper++;
                cased++;
            } else if (Py_UNICODE_ISLOWER(c)) {
                cased++;
            }
        }
        in_word = word;
        if (Py_UNICODE_ISDECIMAL(c)) digits++;
        else if (word && c != '_') letters++;
        commas += is_comma(c);
        symbols += is_symbol(c);
        spaces += c == ' ';
    }
    long chars = n - spaces ? n - spaces : 1;
    Py_UCS4 first = PyUnicode_READ(kind, data, 0), last = PyUnicode_READ(kind, data, n - 1);
    int ellipsis = last == 0x2026 || (n >= 3 && last == '.' && PyUnicode_READ(kind, data, n - 2) == '.'
                                      && PyUnicode_READ(kind, data, n - 3) == '.');
    f[0] = length;
    f[1] = cased ? (double)upper / (double)cased : 0.0;
    f[2] = (double)digits / (double)chars;
    f[3] = (double)letters / (double)chars;
    f[4] = log1p((double)commas);
    f[5] = Py_UNICODE_ISSPACE(PyUnicode_READ_CHAR(raw, 0)) || is_bullet(first) ? 1.0 : 0.0;
    f[6] = log1p((double)symbols);
    f[7] = log((double)repeats);
    f[8] = last == ':' ? 1.0 : 0.0;
    f[9] = ellipsis ? 1.0 : 0.0;
}

static int truth(PyObject *list, Py_ssize_t k) { return PyObject_IsTrue(PyList_GET_ITEM(list, k)); }

static PyObject *line_scores(PyObject *self, PyObject *args) {
    PyObject *raws, *lines, *cols_obj, *prose_obj, *sentence_obj, *weights_obj;
    double bias;
    if (!PyArg_ParseTuple(args, "O!O!O!O!O!O!d", &PyList_Type, &raws, &PyList_Type, &lines, &PyList_Type, &cols_obj,
                          &PyList_Type, &prose_obj, &PyList_Type, &sentence_obj, &PyList_Type, &weights_obj, &bias))
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(lines);
    if (PyList_GET_SIZE(raws) != n || PyList_GET_SIZE(cols_obj) != n || PyList_GET_SIZE(prose_obj) != n
        || PyList_GET_SIZE(sentence_obj) != n || PyList_GET_SIZE(weights_obj) != N_FEATURES) {
        PyErr_SetString(PyExc_ValueError, "line_scores: lists of different lengths, or not 23 weights");
        return NULL;
    }
    double w[N_FEATURES];
    for (int i = 0; i < N_FEATURES; i++) {
        w[i] = PyFloat_AsDouble(PyList_GET_ITEM(weights_obj, i));
        if (w[i] == -1.0 && PyErr_Occurred()) return NULL;
    }
    PyObject *out = NULL, *repeats = NULL;
    long long *cols = PyMem_Calloc(n ? n : 1, sizeof(long long));
    char *prose = PyMem_Calloc(n ? n : 1, 1), *sentence = PyMem_Calloc(n ? n : 1, 1);
    double *lens = PyMem_Calloc(n ? n : 1, sizeof(double)), *run = PyMem_Calloc(n ? n : 1, sizeof(double));
    if (!cols || !prose || !sentence || !lens || !run) {
        PyErr_NoMemory();
        goto done;
    }
    long long prose_cols = 0, all_cols = 0;
    Py_ssize_t first_prose = n, last_prose = -1;
    for (Py_ssize_t k = 0; k < n; k++) {
        PyObject *line = PyList_GET_ITEM(lines, k), *raw = PyList_GET_ITEM(raws, k);
        if (!PyUnicode_Check(line) || !PyUnicode_Check(raw) || !PyUnicode_GET_LENGTH(line) || !PyUnicode_GET_LENGTH(raw)) {
            PyErr_SetString(PyExc_TypeError, "line_scores: lines must be non-empty str");
            goto done;
        }
        cols[k] = PyLong_AsLongLong(PyList_GET_ITEM(cols_obj, k));
        int p = truth(prose_obj, k), s = truth(sentence_obj, k);
        if ((cols[k] == -1 && PyErr_Occurred()) || p < 0 || s < 0) goto done;
        prose[k] = (char)p;
        sentence[k] = (char)s;
        lens[k] = log1p((double)cols[k]);
        all_cols += cols[k];
        if (p) {
            prose_cols += cols[k];
            if (first_prose == n) first_prose = k;
            last_prose = k;
        }
    }
    if (!(out = PyList_New(n))) goto done;
    /* the run of short unpunctuated lines each line sits in */
    for (Py_ssize_t k = 0; k < n;) {
        if (cols[k] < SHORT_COLS && !prose[k]) {
            Py_ssize_t j = k + 1;
            while (j < n && cols[j] < SHORT_COLS && !prose[j]) j++;
            double value = log1p((double)(j - k));
            for (; k < j; k++) run[k] = value;
        } else {
            k++;
        }
    }
    if (!(repeats = PyDict_New())) goto done;
    for (Py_ssize_t k = 0; k < n; k++) {
        PyObject *line = PyList_GET_ITEM(lines, k), *count = PyDict_GetItemWithError(repeats, line);
        if (!count && PyErr_Occurred()) goto done;
        PyObject *next = PyLong_FromSsize_t(count ? PyLong_AsSsize_t(count) + 1 : 1);
        if (!next || PyDict_SetItem(repeats, line, next) < 0) {
            Py_XDECREF(next);
            goto done;
        }
        Py_DECREF(next);
    }
    double doc_prose = (double)prose_cols / (double)(all_cols ? all_cols : 1), doc_lines = log1p((double)n);
    Py_ssize_t last = -1;  /* the last prose line before k */
    Py_ssize_t next_prose = last_prose >= 0 ? first_prose : -1;  /* the first prose line after k, found as k moves */
    for (Py_ssize_t k = 0; k < n; k++) {
        while (next_prose != -1 && next_prose <= k) {
            Py_ssize_t j = next_prose + 1;
            while (j < n && !prose[j]) j++;
            next_prose = j < n ? j : -1;
        }
        PyObject *line = PyList_GET_ITEM(lines, k), *raw = PyList_GET_ITEM(raws, k);
        double f[N_FEATURES];
        Py_ssize_t words, length = PyUnicode_GET_LENGTH(line);
        Py_UCS4 end = PyUnicode_READ_CHAR(line, length - 1);
        int kept = k == 0 || sentence[k] || (k > 0 && k < n - 1 && sentence[k - 1] && sentence[k + 1]);
        double score = Py_HUGE_VAL;
        if (!kept) {
            PyObject *count = PyDict_GetItemWithError(repeats, line);
            if (!count) goto done;
            own_features(raw, line, lens[k], PyLong_AsSsize_t(count), f, &words);
            kept = (end == ':' || end == 0xFF1A) && words >= INTRO_WORDS;  /* _introduces */
        }
        if (!kept) {
            double window = 0.0;
            Py_ssize_t from = k - WINDOW > 0 ? k - WINDOW : 0, to = k + 1 + WINDOW < n ? k + 1 + WINDOW : n;
            for (Py_ssize_t j = from; j < k; j++) window += lens[j];
            for (Py_ssize_t j = k + 1; j < to; j++) window += lens[j];
            Py_ssize_t in_window = (k - from) + (to - k - 1);
            f[10] = k ? lens[k - 1] : 0.0;
            f[11] = k && prose[k - 1] ? 1.0 : 0.0;
            f[12] = k + 1 < n ? lens[k + 1] : 0.0;
            f[13] = k + 1 < n && prose[k + 1] ? 1.0 : 0.0;
            f[14] = in_window ? window / (double)in_window : 0.0;
            f[15] = run[k];
            f[16] = last >= 0 ? (double)(k - last < PROSE_DISTANCE ? k - last : PROSE_DISTANCE) / PROSE_DISTANCE : 1.0;
            f[17] = next_prose >= 0
                        ? (double)(next_prose - k < PROSE_DISTANCE ? next_prose - k : PROSE_DISTANCE) / PROSE_DISTANCE
                        : 1.0;
            f[18] = k < first_prose ? 1.0 : 0.0;
            f[19] = k > last_prose ? 1.0 : 0.0;
            f[20] = n > 1 ? (double)k / (double)(n - 1) : 0.0;
            f[21] = doc_prose;
            f[22] = doc_lines;
            double sum = 0.0;
            for (int i = 0; i < N_FEATURES; i++) sum += w[i] * f[i];
            score = bias + sum;
        }
        PyObject *value = PyFloat_FromDouble(score);
        if (!value) goto done;
        PyList_SET_ITEM(out, k, value);
        if (prose[k]) last = k;
    }
done:
    PyMem_Free(cols);
    PyMem_Free(prose);
    PyMem_Free(sentence);
    PyMem_Free(lens);
    PyMem_Free(run);
    Py_XDECREF(repeats);
    if (PyErr_Occurred()) {
        Py_XDECREF(out);
        return NULL;
    }
    return out;
}

static PyMethodDef methods[] = {
    {"line_scores", line_scores, METH_VARARGS,
     "line_scores(raws, lines, cols, prose, sentence, weights, bias) -> the boilerplate model's logit of each "
     "non-blank line (inf: kept whatever it scores)"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_boilerplate", NULL, -1, methods};

PyMODINIT_FUNC PyInit__boilerplate(void) { return PyModule_Create(&module); }
