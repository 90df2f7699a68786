/* The quality rules' word tokenizer and Gopher word statistics, compiled.

   The oracles are filters/quality.py `tokenize_python` (its compiled regexes) and
   `word_stats_python`; tests/test_words_compiled.py checks that both give the same results on random
   and real texts. The character classes come from Python, built from the same definitions the regexes
   use: `classes` is a bytes object with one byte per BMP code point (the bits below); astral code
   points are never marks or Han/Kana there either (the regexes' classes are BMP only).

   tokenize(text, classes) -> list of words, as `_WORD_OR_CJK_RUN_RE.findall` splits them:
     WORD = STEM (['’-] STEM | (?<=\d)[.,:/](?=\d) STEM)*,  STEM = LETTER+ (MARK+ LETTER*)*,
   LETTER = \w but not '_' nor Han/Kana; each Han/Kana character is a word of its own. LETTER and MARK
   are disjoint and no separator is either, so the greedy scan below is the regex's only match: a
   group's iteration is taken exactly when the character after its separator starts a STEM.

   word_stats(words, stop, classes) -> (characters, words without a letter, stop words): the sum of
   the words' lengths; the words whose first character is not alphabetic and that are decimal or made
   of numbers (alphanumeric, not alphabetic), marks and the separators only; the words whose lower()
   is in the set `stop` (None: 0).

   text_counts(text, classes) -> (symbol tokens, ellipses, extra Hangul jamo, Han/Kana characters,
   a number?, a wide character?), the oracle being `text_counts_python`, in one scan of the text:
   - symbol tokens: whitespace-delimited runs (\s, as the regex, is Py_UNICODE_ISSPACE) of characters
     that are not \w (alphanumeric or '_'), each counted once;
   - ellipses: maximal runs of three or more '.' and maximal runs of '…' / '⋯' (`\.{3,}|[…⋯]+` takes
     exactly these: neither alternative can start inside the other's run);
   - extra jamo: for each Hangul syllable block, 1 for its vowel and 1 more for a final consonant
     (block index modulo 28 not 0, the Unicode composition of a syllable);
   - Han/Kana characters, and whether a number that is not a letter or a wide character occurs.

   normalised_lines(folded) -> the lines of an already casefolded text (split at "\n") as
   filters/template_lines.py `normalise_line` writes them, the oracle being `normalised_lines_python`:
   whitespace (Py_UNICODE_ISSPACE: str.split's) stripped and each run of it as one space, each decimal
   digit (Py_UNICODE_ISDECIMAL: the regex \d) as '0'.

   word_runs(text) -> the maximal runs of alphanumeric characters (Py_UNICODE_ISALNUM: the regex \w
   without '_') of text joined by one space, the oracle being dedup/exact.py `word_runs_python`
   (`[\W_]+` replaced by a space, stripped).

   paragraph_counts(text, classes, punctuation) -> (special characters, punctuation marks) of a paragraph, the
   oracle being filters/nodes.py `paragraph_counts_python`: the characters that are neither letters (the regex
   [^\W\d_]: Py_UNICODE_ISALNUM and not Py_UNICODE_ISDECIMAL) nor combining marks (the MARK bit, BMP only as
   the regex's class), and of those the ones in the str `punctuation`.

   anchors(text, classes, capitalises_nouns) -> the cross-lingual anchors of text in order, lower-cased, the
   oracle being dedup/crosslingual.py `anchors_python`: the tokens of `([^\W_]+(?:[-.,/:#=+][^\W_]+)*)`
   (\w without '_': Py_UNICODE_ISALNUM, from the table in the BMP), scanned greedily (a joiner belongs to a token
   only with an alphanumeric character after it, and runs are maximal, so the scan is the regex's only
   match); a text is foreign when more than 0.3 of its tokens start at U+0370 or above; each ASCII token is
   judged by the oracle's rules (all its tests are ASCII tests there), the gap before it read for a sentence
   end only where a rule asks.

   style_counts(lowered, sample, style_words) -> (words, style words, digit words, long words, contractions,
   first-person words, capitals), the counts filters/synthetic.py `style_features` takes, the oracle being
   `style_counts_python`: the words are `[a-z']+|\d+` of the lower-cased sample (\d: Py_UNICODE_ISDECIMAL,
   as the regex), each counted where it is in the set `style_words`, starts with a digit, has 9 characters
   or more, holds an apostrophe and ends a contraction (n't 's 're 've 'll 'd 'm), or is i, me, my, i'm or
   i've; capitals are the sample's A-Z not preceded by a letter A-Z, a-z or an apostrophe
   (`(?<![A-Za-z'])[A-Z]`). */

#define PY_SSIZE_T_CLEAN
#include <Python.h>

/* The bits of `classes`, each from a regex class of filters/quality.py `char_classes`: a combining mark, Han/Kana,
   a number that is not a letter, an East-Asian wide character, a Hangul syllable, a \w character other than '_'. */
enum { MARK = 1, CJK = 2, NUMBER = 4, WIDE = 8, HANGUL = 16, ALNUM = 32 };

static inline int cls(const unsigned char *classes, Py_UCS4 c) { return c < 0x10000 ? classes[c] : 0; }

/* Py_UNICODE_ISALNUM: from the table inside the BMP (one lookup instead of up to four). */
static inline int is_alnum(const unsigned char *classes, Py_UCS4 c) {
    return c < 0x10000 ? (classes[c] & ALNUM) != 0 : Py_UNICODE_ISALNUM(c);
}

static inline int is_letter(const unsigned char *classes, Py_UCS4 c) {
    return c < 0x10000 ? (classes[c] & (ALNUM | CJK)) == ALNUM : Py_UNICODE_ISALNUM(c);
}

static inline int is_separator(Py_UCS4 c) { return c == '\'' || c == 0x2019 || c == '-'; }

static inline int is_digit_joiner(Py_UCS4 c) { return c == '.' || c == ',' || c == ':' || c == '/'; }

/* The end of the STEM starting at i (text[i] is a letter). */
static Py_ssize_t stem_end(int kind, const void *data, Py_ssize_t n, Py_ssize_t i, const unsigned char *classes) {
    while (i < n) {
        Py_UCS4 c = PyUnicode_READ(kind, data, i);
        if (!is_letter(classes, c) && !(cls(classes, c) & MARK)) break;
        i++;
    }
    return i;
}

static int get_classes(PyObject *obj, const unsigned char **classes) {
    if (!PyBytes_Check(obj) || PyBytes_GET_SIZE(obj) != 0x10000) {
        PyErr_SetString(PyExc_TypeError, "classes must be bytes of length 65536");
        return -1;
    }
    *classes = (const unsigned char *)PyBytes_AS_STRING(obj);
    return 0;
}

static PyObject *tokenize(PyObject *self, PyObject *args) {
    PyObject *text, *classes_obj;
    const unsigned char *classes;
    if (!PyArg_ParseTuple(args, "UO", &text, &classes_obj) || get_classes(classes_obj, &classes) < 0) return NULL;
    int kind = PyUnicode_KIND(text);
    const void *data = PyUnicode_DATA(text);
    Py_ssize_t n = PyUnicode_GET_LENGTH(text), i = 0;
    PyObject *out = PyList_New(0);
    if (!out) return NULL;
    while (i < n) {
        Py_UCS4 c = PyUnicode_READ(kind, data, i);
        Py_ssize_t end;
        if (is_letter(classes, c)) {
            end = stem_end(kind, data, n, i + 1, classes);
            while (end + 1 < n) {
                Py_UCS4 sep = PyUnicode_READ(kind, data, end), next = PyUnicode_READ(kind, data, end + 1);
                if (is_separator(sep) && is_letter(classes, next)) {
                    end = stem_end(kind, data, n, end + 1, classes);
                } else if (is_digit_joiner(sep) && Py_UNICODE_ISDECIMAL(PyUnicode_READ(kind, data, end - 1))
                           && Py_UNICODE_ISDECIMAL(next)) {
                    end = stem_end(kind, data, n, end + 1, classes);  /* a digit is a letter */
                } else {
                    break;
                }
            }
        } else if (cls(classes, c) & CJK) {
            end = i + 1;
        } else {
            i++;
            continue;
        }
        PyObject *word = PyUnicode_Substring(text, i, end);
        if (!word || PyList_Append(out, word) < 0) {
            Py_XDECREF(word);
            Py_DECREF(out);
            return NULL;
        }
        Py_DECREF(word);
        i = end;
    }
    return out;
}

/* Whether `word` counts as a word without a letter (see the header). */
static int without_letter(PyObject *word, const unsigned char *classes) {
    Py_ssize_t n = PyUnicode_GET_LENGTH(word);
    if (n == 0) return 0;
    int kind = PyUnicode_KIND(word);
    const void *data = PyUnicode_DATA(word);
    if (Py_UNICODE_ISALPHA(PyUnicode_READ(kind, data, 0))) return 0;
    int decimal = 1, numeric = 1;
    for (Py_ssize_t i = 0; i < n && (decimal || numeric); i++) {
        Py_UCS4 c = PyUnicode_READ(kind, data, i);
        if (!Py_UNICODE_ISDECIMAL(c)) decimal = 0;
        if (!(cls(classes, c) & (NUMBER | MARK)) && !is_separator(c) && !is_digit_joiner(c)) numeric = 0;
    }
    return decimal || numeric;
}

/* Whether word.lower() is in `stop`: -1 on error. A word whose characters are all their own lower
   case (no upper or title case, simple lower mapping to itself) needs no lower(). */
static int is_stop_word(PyObject *word, PyObject *stop) {
    Py_ssize_t n = PyUnicode_GET_LENGTH(word);
    int kind = PyUnicode_KIND(word);
    const void *data = PyUnicode_DATA(word);
    int upper = 0;
    for (Py_ssize_t i = 0; i < n && !upper; i++) {
        Py_UCS4 c = PyUnicode_READ(kind, data, i);
        upper = c < 128 ? (c >= 'A' && c <= 'Z')
                        : Py_UNICODE_TOLOWER(c) != c || Py_UNICODE_ISUPPER(c) || Py_UNICODE_ISTITLE(c);
    }
    if (!upper) return PySet_Contains(stop, word);
    PyObject *lower = PyObject_CallMethod(word, "lower", NULL);
    if (!lower) return -1;
    int found = PySet_Contains(stop, lower);
    Py_DECREF(lower);
    return found;
}

static PyObject *word_stats(PyObject *self, PyObject *args) {
    PyObject *words, *stop, *classes_obj;
    const unsigned char *classes;
    if (!PyArg_ParseTuple(args, "O!OO", &PyList_Type, &words, &stop, &classes_obj)
        || get_classes(classes_obj, &classes) < 0) return NULL;
    if (stop != Py_None && !PyAnySet_Check(stop)) {
        PyErr_SetString(PyExc_TypeError, "stop must be a set, a frozenset or None");
        return NULL;
    }
    Py_ssize_t m = PyList_GET_SIZE(words), chars = 0, no_letter = 0, stops = 0;
    for (Py_ssize_t k = 0; k < m; k++) {
        PyObject *word = PyList_GET_ITEM(words, k);
        if (!PyUnicode_Check(word)) {
            PyErr_SetString(PyExc_TypeError, "words must be str");
            return NULL;
        }
        chars += PyUnicode_GET_LENGTH(word);
        no_letter += without_letter(word, classes);
        if (stop != Py_None) {
            int found = is_stop_word(word, stop);
            if (found < 0) return NULL;
            stops += found;
        }
    }
    return Py_BuildValue("nnn", chars, no_letter, stops);
}

static PyObject *text_counts(PyObject *self, PyObject *args) {
    PyObject *text, *classes_obj;
    const unsigned char *classes;
    if (!PyArg_ParseTuple(args, "UO", &text, &classes_obj) || get_classes(classes_obj, &classes) < 0) return NULL;
    int kind = PyUnicode_KIND(text);
    const void *data = PyUnicode_DATA(text);
    Py_ssize_t n = PyUnicode_GET_LENGTH(text);
    Py_ssize_t symbol_tokens = 0, ellipses = 0, jamo = 0, cjk = 0, dots = 0;
    int seen = 0;                 /* the bits of `classes` that occurred */
    int in_token = 0, symbols_only = 0, in_ellipsis = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_UCS4 c = PyUnicode_READ(kind, data, i);
        int k = cls(classes, c);
        seen |= k;
        if (Py_UNICODE_ISSPACE(c)) {
            symbol_tokens += in_token && symbols_only;
            in_token = 0;
        } else {
            if (!in_token) in_token = symbols_only = 1;
            if (c == '_' || is_alnum(classes, c)) symbols_only = 0;
        }
        if (c == '.') {
            dots++;
        } else {
            ellipses += dots >= 3;
            dots = 0;
        }
        if (c == 0x2026 || c == 0x22EF) {
            ellipses += !in_ellipsis;
            in_ellipsis = 1;
        } else {
            in_ellipsis = 0;
        }
        if (k & HANGUL) jamo += 1 + ((c - 0xAC00) % 28 != 0);
        cjk += (k & CJK) != 0;
    }
    symbol_tokens += in_token && symbols_only;
    ellipses += dots >= 3;
    return Py_BuildValue("nnnnNN", symbol_tokens, ellipses, jamo, cjk, PyBool_FromLong(seen & NUMBER),
                         PyBool_FromLong(seen & WIDE));
}

static PyObject *paragraph_counts(PyObject *self, PyObject *args) {
    PyObject *text, *classes_obj, *punctuation;
    const unsigned char *classes;
    if (!PyArg_ParseTuple(args, "UOU", &text, &classes_obj, &punctuation) || get_classes(classes_obj, &classes) < 0)
        return NULL;
    int kind = PyUnicode_KIND(text), pkind = PyUnicode_KIND(punctuation);
    const void *data = PyUnicode_DATA(text), *pdata = PyUnicode_DATA(punctuation);
    Py_ssize_t n = PyUnicode_GET_LENGTH(text), np = PyUnicode_GET_LENGTH(punctuation), special = 0, marks = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_UCS4 c = PyUnicode_READ(kind, data, i);
        if ((is_alnum(classes, c) && !Py_UNICODE_ISDECIMAL(c)) || (cls(classes, c) & MARK)) continue;
        special++;
        for (Py_ssize_t j = 0; j < np; j++) {
            if (PyUnicode_READ(pkind, pdata, j) == c) {
                marks++;
                break;
            }
        }
    }
    return Py_BuildValue("nn", special, marks);
}

static inline int is_joiner(Py_UCS4 c) {
    return c == '-' || c == '.' || c == ',' || c == '/' || c == ':' || c == '#' || c == '=' || c == '+';
}

static inline int is_sentence_end(Py_UCS4 c) {
    return c == '.' || c == '!' || c == '?' || c == ':' || c == ';' || c == '\n' || c == 0x3002 || c == 0xFF01 ||
           c == 0xFF1F;
}

/* A token [start, end) and whether the gap before it holds a sentence end (the first token: yes). */
typedef struct { Py_ssize_t start, end; int opens; } Token;

static PyObject *anchors(PyObject *self, PyObject *args) {
    PyObject *text, *classes_obj;
    const unsigned char *classes;
    int capitalises_nouns;
    if (!PyArg_ParseTuple(args, "UOp", &text, &classes_obj, &capitalises_nouns) ||
        get_classes(classes_obj, &classes) < 0)
        return NULL;
    int kind = PyUnicode_KIND(text);
    const void *data = PyUnicode_DATA(text);
    Py_ssize_t n = PyUnicode_GET_LENGTH(text), count = 0, high = 0, gap_start = 0;
    Token *tokens = PyMem_Malloc((n / 2 + 1) * sizeof(Token));
    if (!tokens) return PyErr_NoMemory();
    Py_ssize_t i = 0;
    while (i < n) {
        if (!is_alnum(classes, PyUnicode_READ(kind, data, i))) {
            i++;
            continue;
        }
        Token t = {i, i, count == 0};
        for (Py_ssize_t g = gap_start; g < i && !t.opens; g++) t.opens = is_sentence_end(PyUnicode_READ(kind, data, g));
        while (i < n && is_alnum(classes, PyUnicode_READ(kind, data, i))) i++;
        while (i + 1 < n && is_joiner(PyUnicode_READ(kind, data, i)) &&
               is_alnum(classes, PyUnicode_READ(kind, data, i + 1))) {
            i++;
            while (i < n && is_alnum(classes, PyUnicode_READ(kind, data, i))) i++;
        }
        t.end = gap_start = i;
        high += PyUnicode_READ(kind, data, t.start) >= 0x370;
        tokens[count++] = t;
    }
    int foreign = (double)high > 0.3 * (double)count, names = !foreign && !capitalises_nouns;
    PyObject *out = PyList_New(0);
    char *word = PyMem_Malloc(n + 1);
    if (!out || !word) {
        PyMem_Free(tokens);
        PyMem_Free(word);
        Py_XDECREF(out);
        return out ? PyErr_NoMemory() : NULL;
    }
    for (Py_ssize_t k = 0; k < count; k++) {
        Py_ssize_t len = tokens[k].end - tokens[k].start, j;
        int ascii = 1, letters = 0, digits = 0, lower = 0, upper = 0, code = 0, hyphen = 0, inner_upper = 0;
        for (j = 0; j < len; j++) {
            Py_UCS4 c = PyUnicode_READ(kind, data, tokens[k].start + j);
            if (c > 127) {
                ascii = 0;
                break;
            }
            word[j] = (char)c;
            if (c >= 'a' && c <= 'z') letters++, lower++;
            else if (c >= 'A' && c <= 'Z') letters++, upper++, inner_upper |= j > 0;
            else if (c >= '0' && c <= '9') digits++;
            else code |= c != '-' && c != ',', hyphen |= c == '-';
        }
        if (!ascii) continue;
        int alpha = letters == len, is_lower = lower > 0 && upper == 0, is_upper = upper > 0 && lower == 0;
        int keep = 0, filter = 0; /* filter: 1 letters and digits only, 2 digits only */
        if (alpha) {
            if (is_lower) keep = foreign && len >= 3;
            else keep = (len >= 2 && is_upper) || inner_upper || (len >= 3 && (foreign || (names && !tokens[k].opens)));
        } else if (digits) {
            keep = 1, filter = letters ? 1 : 2;
        } else {
            keep = code || (len >= 2 && is_upper) || (!hyphen && inner_upper)
                   || (len >= 3 && (foreign || (names && !tokens[k].opens && word[0] >= 'A' && word[0] <= 'Z')));
        }
        if (!keep) continue;
        Py_ssize_t m = 0;
        for (j = 0; j < len; j++) {
            char c = word[j];
            if (c >= 'A' && c <= 'Z') c = (char)(c - 'A' + 'a');
            int letter = c >= 'a' && c <= 'z', digit = c >= '0' && c <= '9';
            if (filter == 0 || digit || (filter == 1 && letter)) word[m++] = c;
        }
        PyObject *anchor = PyUnicode_FromStringAndSize(word, m);
        if (!anchor || PyList_Append(out, anchor) < 0) {
            Py_XDECREF(anchor);
            Py_DECREF(out);
            out = NULL;
            break;
        }
        Py_DECREF(anchor);
    }
    PyMem_Free(tokens);
    PyMem_Free(word);
    return out;
}

static PyObject *normalised_lines(PyObject *self, PyObject *args) {
    PyObject *text;
    if (!PyArg_ParseTuple(args, "U", &text)) return NULL;
    int kind = PyUnicode_KIND(text);
    const void *data = PyUnicode_DATA(text);
    Py_ssize_t n = PyUnicode_GET_LENGTH(text), len = 0;
    Py_UCS4 *line = PyMem_Malloc((n + 1) * sizeof(Py_UCS4));
    PyObject *out = PyList_New(0);
    if (!line || !out) {
        PyMem_Free(line);
        Py_XDECREF(out);
        return PyErr_NoMemory();
    }
    int space = 0; /* whitespace after a character of the line, written once another follows */
    for (Py_ssize_t i = 0; i <= n; i++) {
        Py_UCS4 c = i < n ? PyUnicode_READ(kind, data, i) : '\n';
        if (c == '\n') {
            PyObject *normalised = PyUnicode_FromKindAndData(PyUnicode_4BYTE_KIND, line, len);
            if (!normalised || PyList_Append(out, normalised) < 0) {
                Py_XDECREF(normalised);
                Py_DECREF(out);
                PyMem_Free(line);
                return NULL;
            }
            Py_DECREF(normalised);
            len = space = 0;
        } else if (Py_UNICODE_ISSPACE(c)) {
            space = len > 0;
        } else {
            if (space) line[len++] = ' ';
            space = 0;
            line[len++] = Py_UNICODE_ISDECIMAL(c) ? '0' : c;
        }
    }
    PyMem_Free(line);
    return out;
}

static PyObject *word_runs(PyObject *self, PyObject *args) {
    PyObject *text;
    if (!PyArg_ParseTuple(args, "U", &text)) return NULL;
    int kind = PyUnicode_KIND(text);
    const void *data = PyUnicode_DATA(text);
    Py_ssize_t n = PyUnicode_GET_LENGTH(text), len = 0;
    Py_UCS4 *out = PyMem_Malloc((n + 1) * sizeof(Py_UCS4));
    if (!out) return PyErr_NoMemory();
    int gap = 0; /* a non-alphanumeric character after a run, written once another run starts */
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_UCS4 c = PyUnicode_READ(kind, data, i);
        if (Py_UNICODE_ISALNUM(c)) {
            if (gap) out[len++] = ' ';
            gap = 0;
            out[len++] = c;
        } else {
            gap = len > 0;
        }
    }
    PyObject *joined = PyUnicode_FromKindAndData(PyUnicode_4BYTE_KIND, out, len);
    PyMem_Free(out);
    return joined;
}

static inline int is_word_char(Py_UCS4 c) { return (c >= 'a' && c <= 'z') || c == '\''; }

/* Whether the code points [start, end) of the text spell the ASCII string `s`. */
static int spells(int kind, const void *data, Py_ssize_t start, Py_ssize_t end, const char *s) {
    Py_ssize_t len = (Py_ssize_t)strlen(s);
    if (end - start != len) return 0;
    for (Py_ssize_t k = 0; k < len; k++)
        if (PyUnicode_READ(kind, data, start + k) != (Py_UCS4)(unsigned char)s[k]) return 0;
    return 1;
}

static int ends_contraction(int kind, const void *data, Py_ssize_t start, Py_ssize_t end) {
    static const char *suffixes[] = {"n't", "'s", "'re", "'ve", "'ll", "'d", "'m"};
    for (size_t k = 0; k < sizeof suffixes / sizeof *suffixes; k++) {
        Py_ssize_t len = (Py_ssize_t)strlen(suffixes[k]);
        if (end - start >= len && spells(kind, data, end - len, end, suffixes[k])) return 1;
    }
    return 0;
}

static PyObject *style_counts(PyObject *self, PyObject *args) {
    PyObject *lowered, *sample, *style_words;
    if (!PyArg_ParseTuple(args, "UUO!", &lowered, &sample, &PyFrozenSet_Type, &style_words)) return NULL;
    int kind = PyUnicode_KIND(lowered);
    const void *data = PyUnicode_DATA(lowered);
    Py_ssize_t n = PyUnicode_GET_LENGTH(lowered);
    long words = 0, style = 0, digits = 0, long_words = 0, contractions = 0, first_person = 0, capitals = 0;
    for (Py_ssize_t i = 0; i < n;) {
        Py_UCS4 c = PyUnicode_READ(kind, data, i);
        Py_ssize_t j = i + 1;
        int letters = is_word_char(c);
        if (letters) {
            while (j < n && is_word_char(PyUnicode_READ(kind, data, j))) j++;
        } else if (Py_UNICODE_ISDECIMAL(c)) {
            while (j < n && Py_UNICODE_ISDECIMAL(PyUnicode_READ(kind, data, j))) j++;
            digits++;
        } else {
            i++;
            continue;
        }
        words++;
        if (j - i >= 9) long_words++;
        PyObject *word = PyUnicode_Substring(lowered, i, j);
        if (!word) return NULL;
        int found = PySet_Contains(style_words, word);
        Py_DECREF(word);
        if (found < 0) return NULL;
        style += found;
        if (letters) {
            int apostrophe = 0;
            for (Py_ssize_t k = i; k < j && !apostrophe; k++) apostrophe = PyUnicode_READ(kind, data, k) == '\'';
            if (apostrophe && ends_contraction(kind, data, i, j)) contractions++;
            if (spells(kind, data, i, j, "i") || spells(kind, data, i, j, "me") || spells(kind, data, i, j, "my") ||
                spells(kind, data, i, j, "i'm") || spells(kind, data, i, j, "i've"))
                first_person++;
        }
        i = j;
    }
    kind = PyUnicode_KIND(sample);
    data = PyUnicode_DATA(sample);
    n = PyUnicode_GET_LENGTH(sample);
    Py_UCS4 previous = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_UCS4 c = PyUnicode_READ(kind, data, i);
        int letter_before = (previous >= 'A' && previous <= 'Z') || (previous >= 'a' && previous <= 'z') || previous == '\'';
        if (c >= 'A' && c <= 'Z' && !letter_before) capitals++;
        previous = c;
    }
    return Py_BuildValue("(lllllll)", words, style, digits, long_words, contractions, first_person, capitals);
}

/* word_repetition(words, n): filters/nodes.py word_repetition_python, by a hash table of the word n-grams
 * (open addressing, each slot the first start of an n-gram and its count; n-grams compared word by word). */
static int same_ngram(PyObject **w, Py_ssize_t a, Py_ssize_t b, Py_ssize_t n) {
    for (Py_ssize_t k = 0; k < n; k++) {
        PyObject *x = w[a + k], *y = w[b + k];
        if (x == y) continue;
        int eq = PyUnicode_Compare(x, y);
        if (eq == -1 && PyErr_Occurred()) return -1;
        if (eq != 0) return 0;
    }
    return 1;
}

static PyObject *word_repetition(PyObject *self, PyObject *args) {
    PyObject *list;
    Py_ssize_t n;
    if (!PyArg_ParseTuple(args, "O!n", &PyList_Type, &list, &n)) return NULL;
    if (n < 1) { PyErr_SetString(PyExc_ValueError, "n must be at least 1"); return NULL; }
    Py_ssize_t len = PyList_GET_SIZE(list), total = len - n + 1;
    if (total <= 0) return PyFloat_FromDouble(0.0);
    PyObject **w = PySequence_Fast_ITEMS(list);
    Py_hash_t *hash = PyMem_Malloc(len * sizeof(Py_hash_t));
    Py_ssize_t size = 16;
    while (size < 2 * total) size <<= 1;
    Py_ssize_t *start = PyMem_Malloc(size * sizeof(Py_ssize_t)), *count = PyMem_Calloc(size, sizeof(Py_ssize_t));
    PyObject *result = NULL;
    if (!hash || !start || !count) { PyErr_NoMemory(); goto done; }
    for (Py_ssize_t i = 0; i < len; i++) {
        if (!PyUnicode_Check(w[i])) { PyErr_SetString(PyExc_TypeError, "words must be str"); goto done; }
        if ((hash[i] = PyObject_Hash(w[i])) == -1) goto done;
    }
    Py_ssize_t repeated = 0;
    for (Py_ssize_t i = 0; i < total; i++) {
        Py_uhash_t h = 1469598103934665603ULL;
        for (Py_ssize_t k = 0; k < n; k++) h = (h ^ (Py_uhash_t)hash[i + k]) * 1099511628211ULL;
        Py_ssize_t slot = (Py_ssize_t)(h & (Py_uhash_t)(size - 1));
        for (;;) {
            if (count[slot] == 0) { start[slot] = i; count[slot] = 1; break; }
            int same = same_ngram(w, start[slot], i, n);
            if (same < 0) goto done;
            if (same) {
                repeated += count[slot] == 1 ? 2 : 1;  /* an n-gram seen twice counts both occurrences */
                count[slot]++;
                break;
            }
            slot = (slot + 1) & (size - 1);
        }
    }
    result = PyFloat_FromDouble((double)repeated / (double)total);
done:
    PyMem_Free(hash);
    PyMem_Free(start);
    PyMem_Free(count);
    return result;
}

static PyMethodDef methods[] = {
    {"tokenize", tokenize, METH_VARARGS, "tokenize(text, classes) -> the quality rules' words of text"},
    {"word_stats", word_stats, METH_VARARGS,
     "word_stats(words, stop, classes) -> (characters, words without a letter, stop words)"},
    {"text_counts", text_counts, METH_VARARGS,
     "text_counts(text, classes) -> (symbol tokens, ellipses, extra Hangul jamo, Han/Kana characters, a number?, "
     "a wide character?)"},
    {"normalised_lines", normalised_lines, METH_VARARGS,
     "normalised_lines(folded) -> each line of a casefolded text, stripped, whitespace runs as one space, digits as 0"},
    {"word_repetition", word_repetition, METH_VARARGS,
     "word_repetition(words, n) -> the share of word n-grams that occur more than once"},
    {"word_runs", word_runs, METH_VARARGS, "word_runs(text) -> the runs of alphanumeric characters joined by one space"},
    {"paragraph_counts", paragraph_counts, METH_VARARGS,
     "paragraph_counts(text, classes, punctuation) -> (characters not letters or marks, those in punctuation)"},
    {"anchors", anchors, METH_VARARGS,
     "anchors(text, classes, capitalises_nouns) -> the cross-lingual anchors of text, lower-cased, in order"},
    {"style_counts", style_counts, METH_VARARGS,
     "style_counts(lowered, sample, style_words) -> (words, style words, digit words, long words, contractions, "
     "first-person words, capitals) of an English prose sample"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_words", NULL, -1, methods};

PyMODINIT_FUNC PyInit__words(void) { return PyModule_Create(&module); }
