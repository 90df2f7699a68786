/* The DeepSeek-V3 tokenizer's pre-tokenizer and byte-level BPE, compiled, with its pieces' token ids cached.

   The oracle is the Hugging Face tokenizer itself (packing/pieces.py; tests/test_pieces.py checks that both
   give the same token ids on random and real texts). Its pre-tokenizer is three Oniguruma regex splits, each
   match and each gap between matches a piece, each split applied to every piece of the one before:
     1. \p{N}{1,3}
     2. [一-龥぀-ゟ゠-ヿ]+   (U+4E00-U+9FA5, U+3040-U+30FF: Han and Kana, "CJK" below)
     3. [!-/:-@[-`{-~][A-Za-z]+ | [^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+ | ' '?[\p{P}\p{S}]+[\r\n]* | \s*[\r\n]+
        | \s+(?!\S) | \s+
   then the byte-level BPE of each piece on its own. Split 1 cuts every maximal run of numbers into threes
   from its start, split 2 every maximal run of CJK between them; a number is never CJK, so the pieces of
   splits 1 and 2 are the runs below, and split 3 scans each run that is not numbers. Split 3 as a scanner,
   at each position the first alternative that matches (Oniguruma's leftmost-first search):
     1. an ASCII punctuation mark followed by ASCII letters: it and all of them;
     2. a character that is not \r, \n, a letter or punctuation followed by a letter, or a letter: from there
        the maximal run of letters (letters and marks are the same class to every alternative);
     3. ' ' followed by punctuation, or punctuation: the maximal run of punctuation and the \r\n after it;
     4. whitespace holding \r or \n: up to its last \r or \n (\s* backs off to it);
     5. whitespace reaching the piece's end: all of it; followed by more than one: all but the last
        (\s+ backs off one for the lookahead); a single whitespace: itself (the last alternative);
   a position where none matches belongs to the gap before the next match.

   `classes` is one byte per code point (packing/pieces.py builds it from packing/pieces_classes.txt, measured
   from the tokenizer's own regexes for every code point): which of the classes below the regexes give it
   (\p{L} and \p{M} as one, \p{P} and \p{S} as one: no alternative tells them apart).

   encode(text, cache, classes, bpe) -> bytes: the token ids of text, as little-endian uint32, each piece's ids
   `cache[piece]` (bytes), or for a piece not there its byte-level BPE (`bpe`, a table made by bpe()), put in
   the cache; a list of the pieces neither gives (repeats included: a piece over MAX_BPE_BYTES, any piece not
   cached without `bpe`) when there is one; None when text holds a surrogate (the tokenizer rejects it).
   Given `lengths` (each token id's length in bytes, uint16), (ids, offsets): offsets the character span of
   each token as int64 (start, end) pairs, as the tokenizer's offsets are (its post-processor trims none). */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

enum { OTHER = 0, LETTER = 1, NUMBER = 2, PUNCT = 3, SPACE = 4 };

static inline int is_cjk(Py_UCS4 c) { return (c >= 0x4E00 && c <= 0x9FA5) || (c >= 0x3040 && c <= 0x30FF); }
static inline int is_ascii_letter(Py_UCS4 c) { return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z'); }
static inline int is_ascii_punct(Py_UCS4 c) {
    return (c >= '!' && c <= '/') || (c >= ':' && c <= '@') || (c >= '[' && c <= '`') || (c >= '{' && c <= '~');
}
static inline int is_newline(Py_UCS4 c) { return c == '\r' || c == '\n'; }

/* The byte-level BPE: each merge (left id, right id) -> (its rank, the merged id) in an open-addressing table,
   and the id of each byte's token. */
typedef struct {
    uint64_t *keys;  /* left << 32 | right; EMPTY where no merge */
    uint32_t *rank, *merged;
    size_t mask;
    uint32_t byte_ids[256];
} Bpe;

#define EMPTY UINT64_MAX
#define MAX_BPE_BYTES 128  /* a longer piece goes to the Hugging Face BPE (this one is quadratic in it) */

static inline size_t slot(const Bpe *bpe, uint64_t key) {
    size_t h = (size_t)((key * 0x9E3779B97F4A7C15ull) >> 20) & bpe->mask;
    while (bpe->keys[h] != key && bpe->keys[h] != EMPTY) h = (h + 1) & bpe->mask;
    return h;
}

static void bpe_free(PyObject *capsule) {
    Bpe *bpe = PyCapsule_GetPointer(capsule, "packing._pieces.Bpe");
    if (!bpe) return;
    PyMem_Free(bpe->keys);
    PyMem_Free(bpe->rank);
    PyMem_Free(bpe->merged);
    PyMem_Free(bpe);
}

/* bpe(left, right, merged, byte_ids) -> the BPE's table: the merges in rank order as uint32 arrays of ids (a
   pair that occurs twice keeps its last rank, as the tokenizer's map of them does), and the 256 bytes' ids. */
static PyObject *bpe_table(PyObject *self, PyObject *args) {
    Py_buffer left, right, merged, byte_ids;
    if (!PyArg_ParseTuple(args, "y*y*y*y*", &left, &right, &merged, &byte_ids)) return NULL;
    PyObject *result = NULL;
    size_t n = left.len / 4, size = 1024;
    Bpe *bpe = NULL;
    if (right.len != left.len || merged.len != left.len || left.len % 4 || byte_ids.len != 256 * 4) {
        PyErr_SetString(PyExc_ValueError, "left, right and merged must be uint32 arrays of one length, byte_ids 256");
        goto done;
    }
    while (size < 2 * n) size *= 2;
    if (!(bpe = PyMem_Calloc(1, sizeof(Bpe))) || !(bpe->keys = PyMem_Malloc(size * sizeof(uint64_t)))
        || !(bpe->rank = PyMem_Malloc(size * 4)) || !(bpe->merged = PyMem_Malloc(size * 4))) {
        PyErr_NoMemory();
        goto done;
    }
    bpe->mask = size - 1;
    for (size_t i = 0; i < size; i++) bpe->keys[i] = EMPTY;
    const uint32_t *l = left.buf, *r = right.buf, *m = merged.buf;
    for (size_t i = 0; i < n; i++) {
        uint64_t key = (uint64_t)l[i] << 32 | r[i];
        size_t h = slot(bpe, key);
        bpe->keys[h] = key;
        bpe->rank[h] = (uint32_t)i;
        bpe->merged[h] = m[i];
    }
    memcpy(bpe->byte_ids, byte_ids.buf, sizeof(bpe->byte_ids));
    result = PyCapsule_New(bpe, "packing._pieces.Bpe", bpe_free);
done:
    if (!result && bpe) {
        PyMem_Free(bpe->keys);
        PyMem_Free(bpe->rank);
        PyMem_Free(bpe->merged);
        PyMem_Free(bpe);
    }
    PyBuffer_Release(&left);
    PyBuffer_Release(&right);
    PyBuffer_Release(&merged);
    PyBuffer_Release(&byte_ids);
    return result;
}

/* The ids of the bytes s[0:n] (n <= MAX_BPE_BYTES) into ids; their number. The Hugging Face BPE merges, while
   any adjacent pair has a merge, the pair of the lowest rank, the leftmost of equal ones; so does this scan. */
static Py_ssize_t bpe_ids(const Bpe *bpe, const unsigned char *s, Py_ssize_t n, uint32_t *ids) {
    for (Py_ssize_t i = 0; i < n; i++) ids[i] = bpe->byte_ids[s[i]];
    while (n > 1) {
        Py_ssize_t best = -1;
        uint32_t best_rank = UINT32_MAX, best_id = 0;
        for (Py_ssize_t i = 0; i + 1 < n; i++) {
            size_t h = slot(bpe, (uint64_t)ids[i] << 32 | ids[i + 1]);
            if (bpe->keys[h] != EMPTY && bpe->rank[h] < best_rank) {
                best = i;
                best_rank = bpe->rank[h];
                best_id = bpe->merged[h];
            }
        }
        if (best < 0) break;
        ids[best] = best_id;
        memmove(ids + best + 1, ids + best + 2, (n - best - 2) * sizeof(uint32_t));
        n--;
    }
    return n;
}

/* A growing byte buffer. */
typedef struct {
    char *data;
    Py_ssize_t len, cap;
} Buffer;

static int append(Buffer *b, const void *bytes, Py_ssize_t n) {
    if (b->len + n > b->cap) {
        Py_ssize_t cap = b->cap * 2 > b->len + n ? b->cap * 2 : b->len + n;
        char *grown = PyMem_Realloc(b->data, cap);
        if (!grown) { PyErr_NoMemory(); return -1; }
        b->data = grown;
        b->cap = cap;
    }
    memcpy(b->data + b->len, bytes, n);
    b->len += n;
    return 0;
}

typedef struct {
    PyObject *text, *cache, *missing;  /* missing: NULL until a piece is neither in the cache nor short enough */
    const Bpe *bpe;                    /* NULL: every piece not in the cache is missing */
    const uint16_t *lengths;           /* each token's length in bytes; NULL: no offsets */
    Py_ssize_t n_lengths;
    Buffer ids, offsets;               /* offsets: int64 (start, end) character pairs, one per token */
} Out;

static inline int utf8_length(Py_UCS4 c) { return c < 0x80 ? 1 : c < 0x800 ? 2 : c < 0x10000 ? 3 : 4; }

/* The character span of each token of text[a:b], whose ids are `ids` (n of them): the characters its bytes
   fall in, from the one holding its first byte to the one holding its last (a token that starts or ends
   inside a character shares it with its neighbour), as the tokenizer's offsets give them. */
static int token_offsets(Out *o, Py_ssize_t a, Py_ssize_t b, const unsigned char *ids, Py_ssize_t n) {
    int kind = PyUnicode_KIND(o->text);
    const void *data = PyUnicode_DATA(o->text);
    Py_ssize_t c = a, c_byte = 0, byte = 0;  /* c: the character holding byte `byte` of the piece, from c_byte */
    for (Py_ssize_t t = 0; t < n; t++) {
        uint32_t id = (uint32_t)ids[4 * t] | (uint32_t)ids[4 * t + 1] << 8 | (uint32_t)ids[4 * t + 2] << 16
                      | (uint32_t)ids[4 * t + 3] << 24;
        if (id >= (uint32_t)o->n_lengths || !o->lengths[id]) {
            PyErr_Format(PyExc_ValueError, "token %u has no byte length", id);
            return -1;
        }
        Py_ssize_t last = byte + o->lengths[id] - 1;
        while (c < b && c_byte + utf8_length(PyUnicode_READ(kind, data, c)) <= byte)
            c_byte += utf8_length(PyUnicode_READ(kind, data, c++));
        int64_t span[2] = {c, 0};
        Py_ssize_t e = c, e_byte = c_byte;
        while (e < b && e_byte + utf8_length(PyUnicode_READ(kind, data, e)) <= last)
            e_byte += utf8_length(PyUnicode_READ(kind, data, e++));
        span[1] = e + 1;
        if (append(&o->offsets, span, sizeof(span)) < 0) return -1;
        byte = last + 1;
    }
    return 0;
}

/* The ids of a piece not in the cache, from the BPE, put in the cache; NULL (no error set) where it is too
   long for it. */
static PyObject *learn(Out *o, PyObject *key) {
    Py_ssize_t n;
    if (!o->bpe) return NULL;
    const char *utf8 = PyUnicode_AsUTF8AndSize(key, &n);
    if (!utf8 || n > MAX_BPE_BYTES) return NULL;
    uint32_t ids[MAX_BPE_BYTES];
    n = bpe_ids(o->bpe, (const unsigned char *)utf8, n, ids);
    unsigned char le[MAX_BPE_BYTES * 4];
    for (Py_ssize_t i = 0; i < n; i++) {
        le[4 * i] = ids[i] & 0xFF;
        le[4 * i + 1] = (ids[i] >> 8) & 0xFF;
        le[4 * i + 2] = (ids[i] >> 16) & 0xFF;
        le[4 * i + 3] = ids[i] >> 24;
    }
    PyObject *value = PyBytes_FromStringAndSize((const char *)le, n * 4);
    if (value && PyDict_SetItem(o->cache, key, value) < 0) Py_CLEAR(value);
    return value;
}

/* Appends the ids of text[a:b] (a < b); -1 on error. */
static int piece(Out *o, Py_ssize_t a, Py_ssize_t b) {
    PyObject *key = PyUnicode_Substring(o->text, a, b);
    if (!key) return -1;
    PyObject *ids = PyDict_GetItemWithError(o->cache, key), *learnt = NULL;
    if (!ids) {
        if (PyErr_Occurred() || (!(ids = learnt = learn(o, key)) && PyErr_Occurred())) { Py_DECREF(key); return -1; }
    }
    if (!ids) {
        if (!o->missing && !(o->missing = PyList_New(0))) { Py_DECREF(key); return -1; }
        int r = PyList_Append(o->missing, key);
        Py_DECREF(key);
        return r;
    }
    Py_DECREF(key);
    Py_XDECREF(learnt);  /* the cache holds it */
    if (o->missing) return 0;
    if (!PyBytes_Check(ids)) { PyErr_SetString(PyExc_TypeError, "cache values must be bytes"); return -1; }
    Py_ssize_t n = PyBytes_GET_SIZE(ids);
    if (o->lengths && token_offsets(o, a, b, (const unsigned char *)PyBytes_AS_STRING(ids), n / 4) < 0) return -1;
    return append(&o->ids, PyBytes_AS_STRING(ids), n);
}

#define AT(i) PyUnicode_READ(kind, data, (i))
#define CLS(c) (classes[(c)])

/* Split 3 over text[s:e], a run without numbers. */
static int split3(Out *o, int kind, const void *data, const unsigned char *classes, Py_ssize_t s, Py_ssize_t e) {
    Py_ssize_t i = s, gap = s;
    while (i < e) {
        Py_UCS4 c = AT(i);
        int k = CLS(c);
        Py_ssize_t end = -1, j;
        if (is_ascii_punct(c) && i + 1 < e && is_ascii_letter(AT(i + 1))) {
            for (j = i + 1; j < e && is_ascii_letter(AT(j)); j++) {}
            end = j;
        } else if (k == LETTER || (!is_newline(c) && k != PUNCT && i + 1 < e && CLS(AT(i + 1)) == LETTER)) {
            for (j = i + 1; j < e && CLS(AT(j)) == LETTER; j++) {}
            end = j;
        } else if (k == PUNCT || (c == ' ' && i + 1 < e && CLS(AT(i + 1)) == PUNCT)) {
            for (j = i + 1; j < e && CLS(AT(j)) == PUNCT; j++) {}
            while (j < e && is_newline(AT(j))) j++;
            end = j;
        } else if (k == SPACE) {
            Py_ssize_t last = -1;
            for (j = i; j < e && CLS(AT(j)) == SPACE; j++)
                if (is_newline(AT(j))) last = j;
            end = last >= 0 ? last + 1 : (j == e || j - i == 1) ? j : j - 1;
        }
        if (end < 0) { i++; continue; }
        if (gap < i && piece(o, gap, i) < 0) return -1;
        if (piece(o, i, end) < 0) return -1;
        gap = i = end;
    }
    return gap < e ? piece(o, gap, e) : 0;
}

static PyObject *encode(PyObject *self, PyObject *args) {
    PyObject *text, *cache, *capsule = Py_None;
    Py_buffer classes, lengths = {0};
    if (!PyArg_ParseTuple(args, "UO!y*|Oy*", &text, &PyDict_Type, &cache, &classes, &capsule, &lengths)) return NULL;
    const Bpe *bpe = NULL;
    if ((capsule != Py_None && !(bpe = PyCapsule_GetPointer(capsule, "packing._pieces.Bpe")))
        || classes.len != 0x110000 || lengths.len % 2) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "classes must hold one byte per code point, lengths uint16 each");
        PyBuffer_Release(&classes);
        if (lengths.obj) PyBuffer_Release(&lengths);
        return NULL;
    }
    const unsigned char *cls = classes.buf;
    int kind = PyUnicode_KIND(text);
    const void *data = PyUnicode_DATA(text);
    Py_ssize_t n = PyUnicode_GET_LENGTH(text), i = 0, j;
    if (kind != PyUnicode_1BYTE_KIND)
        for (i = 0; i < n; i++) {
            Py_UCS4 c = AT(i);
            if (c >= 0xD800 && c <= 0xDFFF) {
                PyBuffer_Release(&classes);
                if (lengths.obj) PyBuffer_Release(&lengths);
                Py_RETURN_NONE;
            }
        }
    Out o = {text, cache, NULL, bpe, lengths.obj ? lengths.buf : NULL, lengths.len / 2, {0}, {0}};
    int err = 0;
    for (i = 0; i < n && !err; i = j) {
        Py_UCS4 c = AT(i);
        if (cls[c] == NUMBER) {
            for (j = i + 1; j < n && cls[AT(j)] == NUMBER; j++) {}
            for (Py_ssize_t a = i; a < j && !err; a += 3) err = piece(&o, a, a + 3 < j ? a + 3 : j) < 0;
        } else {
            int cjk = is_cjk(c);
            for (j = i + 1; j < n && cls[AT(j)] != NUMBER && is_cjk(AT(j)) == cjk; j++) {}
            err = split3(&o, kind, data, cls, i, j) < 0;
        }
    }
    PyBuffer_Release(&classes);
    PyObject *result = NULL;
    if (!err && o.missing)
        result = (Py_INCREF(o.missing), o.missing);
    else if (!err && !o.lengths)
        result = PyBytes_FromStringAndSize(o.ids.data ? o.ids.data : "", o.ids.len);
    else if (!err)
        result = Py_BuildValue("y#y#", o.ids.data ? o.ids.data : "", o.ids.len,
                               o.offsets.data ? o.offsets.data : "", o.offsets.len);
    if (lengths.obj) PyBuffer_Release(&lengths);
    Py_XDECREF(o.missing);
    PyMem_Free(o.ids.data);
    PyMem_Free(o.offsets.data);
    return result;
}

static PyMethodDef methods[] = {
    {"encode", encode, METH_VARARGS,
     "encode(text, cache, classes, bpe=None, lengths=None) -> the token ids of text (uint32 bytes) from the cache "
     "of its pieces' ids and the BPE, with lengths (uint16 bytes of each token) (ids, offsets: int64 character "
     "pairs); the pieces missing from both (list), or None for a text with a surrogate"},
    {"bpe", bpe_table, METH_VARARGS,
     "bpe(left, right, merged, byte_ids) -> the byte-level BPE of these merges (uint32 ids, in rank order)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_pieces", NULL, -1, methods};

PyMODINIT_FUNC PyInit__pieces(void) { return PyModule_Create(&module); }
