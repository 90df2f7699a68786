/* Word n-gram coverage for the Gopher repetition rules (Rae et al. 2021, A.1.1, table A1), compiled.

   The oracle is filters/quality.py `ngram_coverage_python` (numpy); tests/test_ngrams_compiled.py checks
   that both give the same integers on random and real texts. What it computes, for a list of words:
   - total: the characters of all words;
   - for each n of `top_ns`: the characters of the words covered by the occurrences of the most frequent
     n-gram (ties: the longest in characters, then the first seen), each word once; 0 when no n-gram
     occurs twice;
   - for each n of `dup_ns`: the characters of the words covered by n-gram occurrences that repeat an
     earlier occurrence, each word once.
   n-grams are numbered densely in order of first occurrence: word ids from a table of the word strings
   (hash, then string equality), then each n-gram's id from the pair (its (n-1)-gram's id, its last
   word's id) through an open-addressing table of 64-bit keys, which an n-gram whose (n-1)-gram occurs
   once skips (it cannot occur twice: it takes the next id). One pass per n, linear in the words;
   n stops growing once no n-gram repeats (no longer one can). */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static uint64_t mix64(uint64_t x) { /* splitmix64's finaliser */
    x ^= x >> 30; x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27; x *= 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

typedef struct { uint64_t *keys; int64_t *ids; size_t mask; } Table;

static int table_init(Table *t, Py_ssize_t n) {
    size_t cap = 16;
    while (cap < (size_t)n * 2) cap <<= 1;
    t->keys = malloc(cap * sizeof(uint64_t));
    t->ids = malloc(cap * sizeof(int64_t));
    t->mask = cap - 1;
    return (t->keys && t->ids) ? 0 : -1;
}

static void table_clear(Table *t) { memset(t->ids, 0xff, (t->mask + 1) * sizeof(int64_t)); }

static void table_free(Table *t) { free(t->keys); free(t->ids); }

/* The id of `key`, a new one (*next, then incremented) if it is not in the table yet. */
static int64_t table_id(Table *t, uint64_t key, int64_t *next) {
    size_t i = mix64(key) & t->mask;
    while (t->ids[i] >= 0) {
        if (t->keys[i] == key) return t->ids[i];
        i = (i + 1) & t->mask;
    }
    t->keys[i] = key;
    t->ids[i] = (*next)++;
    return t->ids[i];
}

/* Word ids in order of first occurrence: -1 on error (a word that is not a str). */
static int64_t word_ids(PyObject *words, Py_ssize_t m, int64_t *ids, int64_t *lens) {
    size_t cap = 16;
    while (cap < (size_t)m * 2) cap <<= 1;
    size_t mask = cap - 1;
    PyObject **slots = calloc(cap, sizeof(PyObject *));
    int64_t *slot_ids = malloc(cap * sizeof(int64_t));
    if (!slots || !slot_ids) { free(slots); free(slot_ids); PyErr_NoMemory(); return -1; }
    int64_t next = 0;
    for (Py_ssize_t w = 0; w < m; w++) {
        PyObject *word = PyList_GET_ITEM(words, w);
        if (!PyUnicode_Check(word)) {
            PyErr_SetString(PyExc_TypeError, "words must be str");
            free(slots); free(slot_ids); return -1;
        }
        lens[w] = PyUnicode_GET_LENGTH(word);
        Py_hash_t h = PyObject_Hash(word);
        if (h == -1) { free(slots); free(slot_ids); return -1; }
        size_t i = mix64((uint64_t)h) & mask;
        while (slots[i] != NULL) {
            if (slots[i] == word || PyUnicode_Compare(slots[i], word) == 0) break;
            i = (i + 1) & mask;
        }
        if (slots[i] == NULL) { slots[i] = word; slot_ids[i] = next++; }
        ids[w] = slot_ids[i];
    }
    free(slots); free(slot_ids);
    return next;
}

/* The characters of the words at positions [start, start + n) of the marked starts, each word once. */
static int64_t covered_chars(const char *starts, Py_ssize_t count, Py_ssize_t n, const int64_t *lens) {
    int64_t chars = 0;
    Py_ssize_t end = 0; /* words before `end` are counted */
    for (Py_ssize_t i = 0; i < count; i++) {
        if (!starts[i]) continue;
        Py_ssize_t from = i > end ? i : end;
        for (Py_ssize_t w = from; w < i + n; w++) chars += lens[w];
        if (i + n > end) end = i + n;
    }
    return chars;
}

static int contains(PyObject *ns, Py_ssize_t n) {
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(ns); i++)
        if (PyLong_AsSsize_t(PyTuple_GET_ITEM(ns, i)) == n) return 1;
    return 0;
}

static Py_ssize_t largest(PyObject *ns) {
    Py_ssize_t best = 0;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(ns); i++) {
        Py_ssize_t n = PyLong_AsSsize_t(PyTuple_GET_ITEM(ns, i));
        if (n > best) best = n;
    }
    return best;
}

static int put(PyObject *dict, Py_ssize_t n, int64_t chars) {
    PyObject *key = PyLong_FromSsize_t(n), *value = PyLong_FromLongLong(chars);
    int rc = (key && value) ? PyDict_SetItem(dict, key, value) : -1;
    Py_XDECREF(key); Py_XDECREF(value);
    return rc;
}

static PyObject *ngram_coverage(PyObject *self, PyObject *args) {
    PyObject *words, *top_ns, *dup_ns;
    if (!PyArg_ParseTuple(args, "O!O!O!", &PyList_Type, &words, &PyTuple_Type, &top_ns, &PyTuple_Type, &dup_ns))
        return NULL;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(top_ns) + PyTuple_GET_SIZE(dup_ns); i++) {
        PyObject *n = i < PyTuple_GET_SIZE(top_ns) ? PyTuple_GET_ITEM(top_ns, i)
                                                    : PyTuple_GET_ITEM(dup_ns, i - PyTuple_GET_SIZE(top_ns));
        if (!PyLong_Check(n) || PyLong_AsSsize_t(n) < 1) {
            PyErr_SetString(PyExc_ValueError, "n-gram lengths must be ints >= 1");
            return NULL;
        }
    }
    Py_ssize_t m = PyList_GET_SIZE(words);
    PyObject *top = PyDict_New(), *dup = PyDict_New();
    int64_t *ids = malloc((m + 1) * sizeof(int64_t)), *lens = malloc((m + 1) * sizeof(int64_t));
    int64_t *gram = malloc((m + 1) * sizeof(int64_t)), *counts = malloc((m + 1) * sizeof(int64_t));
    int64_t *glen = malloc((m + 1) * sizeof(int64_t)), *csum = malloc((m + 1) * sizeof(int64_t));
    char *starts = malloc(m + 1);
    Table table = {NULL, NULL, 0};
    PyObject *result = NULL;
    if (!top || !dup || !ids || !lens || !gram || !counts || !glen || !csum || !starts
        || table_init(&table, m + 1) < 0) {
        PyErr_NoMemory();
        goto done;
    }
    int64_t base = word_ids(words, m, ids, lens);
    if (base < 0) goto done;
    csum[0] = 0; /* csum[i] = the characters of the first i words */
    for (Py_ssize_t w = 0; w < m; w++) csum[w + 1] = csum[w] + lens[w];
    int64_t total = csum[m];
    Py_ssize_t max_n = largest(top_ns) > largest(dup_ns) ? largest(top_ns) : largest(dup_ns);
    for (Py_ssize_t n = 1; n <= max_n; n++) { /* zeros unless found below */
        if (contains(top_ns, n) && put(top, n, 0) < 0) goto done;
        if (contains(dup_ns, n) && put(dup, n, 0) < 0) goto done;
    }
    if (m >= 2) {
        memcpy(gram, ids, m * sizeof(int64_t));
        int64_t distinct = base;
        for (Py_ssize_t n = 1; n <= max_n && n <= m; n++) {
            Py_ssize_t count = m - n + 1;
            if (n > 1) { /* gram[i] = id of the n-gram at i, from the (n-1)-gram's id and the next word's */
                memset(counts, 0, distinct * sizeof(int64_t)); /* occurrences of each (n-1)-gram */
                for (Py_ssize_t i = 0; i <= count; i++) counts[gram[i]]++;
                table_clear(&table);
                distinct = 0;
                for (Py_ssize_t i = 0; i < count; i++) /* an n-gram whose (n-1)-gram occurs once is new */
                    gram[i] = counts[gram[i]] == 1 ? distinct++
                            : table_id(&table, (uint64_t)gram[i] * (uint64_t)base + (uint64_t)ids[i + n - 1], &distinct);
            }
            if (distinct == count) break; /* no n-gram repeats, so no longer one does either */
            int want_top = contains(top_ns, n), want_dup = contains(dup_ns, n);
            if (!want_top && !want_dup) continue;
            if (want_top) {
                memset(counts, 0, distinct * sizeof(int64_t));
                for (Py_ssize_t i = 0; i < count; i++) {
                    counts[gram[i]]++;
                    glen[gram[i]] = csum[i + n] - csum[i];
                }
                int64_t best = 0; /* ids are in order of first occurrence: the first of the tied is the lowest */
                for (int64_t g = 1; g < distinct; g++)
                    if (counts[g] > counts[best] || (counts[g] == counts[best] && glen[g] > glen[best])) best = g;
                if (counts[best] >= 2) {
                    for (Py_ssize_t i = 0; i < count; i++) starts[i] = gram[i] == best;
                    if (put(top, n, covered_chars(starts, count, n, lens)) < 0) goto done;
                }
            }
            if (want_dup) { /* an occurrence repeats an earlier one unless it introduced its id */
                int64_t seen = 0;
                for (Py_ssize_t i = 0; i < count; i++) {
                    starts[i] = gram[i] != seen;
                    if (gram[i] == seen) seen++;
                }
                if (put(dup, n, covered_chars(starts, count, n, lens)) < 0) goto done;
            }
        }
    }
    result = Py_BuildValue("LOO", (long long)total, top, dup);
done:
    Py_XDECREF(top); Py_XDECREF(dup);
    free(ids); free(lens); free(gram); free(counts); free(glen); free(csum); free(starts);
    table_free(&table);
    return result;
}

static PyMethodDef methods[] = {
    {"ngram_coverage", ngram_coverage, METH_VARARGS,
     "ngram_coverage(words: list[str], top_ns: tuple[int, ...], dup_ns: tuple[int, ...]) -> "
     "(total chars, {n: chars covered by the most frequent n-gram}, {n: chars covered by repeated n-grams})"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_ngrams",
                                    "Word n-gram coverage for the Gopher repetition rules, compiled.", -1, methods};

PyMODINIT_FUNC PyInit__ngrams(void) { return PyModule_Create(&module); }
