/* Where each record of a Kafka record batch (magic 2) starts: the chain of record lengths.
 *
 * Why C: a v2 record opens with its length (a zigzag varint), so the start of record i + 1 is
 * known only once record i's length is read. numpy cannot follow such a chain, and a Python loop
 * costs a few hundred nanoseconds a record -- more than everything else the executors do per
 * record (docs/spark.md, "Executors"). This loop is that chain and nothing else; every other
 * field is read column-wise with numpy (decode.py). _chain.py holds the same walk in Python,
 * used when the package was built without a C compiler.
 *
 * record_starts(data, out, spans, counts): data is any bytes-like object; out a writable int64
 * buffer of sum(counts) elements; spans int64 [start0, end0, start1, end1, ...] (byte positions of
 * each batch's record section in data); counts int64, one per span. Fills out with the position
 * of every record's length varint. Raises ValueError unless each section holds exactly its count
 * of records.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

static int walk(const uint8_t *data, Py_ssize_t size, int64_t *out, Py_ssize_t out_len, const int64_t *spans,
                const int64_t *counts, Py_ssize_t batches, const char **why)
{
    Py_ssize_t k = 0;
    for (Py_ssize_t b = 0; b < batches; b++) {
        int64_t pos = spans[2 * b], end = spans[2 * b + 1], count = counts[b];
        if (pos < 0 || end > size || pos > end || count < 0 || count > out_len - k) {
            *why = "a batch's span or count does not fit its buffer";
            return -1;
        }
        for (int64_t i = 0; i < count; i++) {
            uint64_t v = 0;
            int shift = 0;
            out[k++] = pos;
            for (;;) {
                if (pos >= end) {
                    *why = "a record runs past the end of its batch";
                    return -1;
                }
                uint8_t byte = data[pos++];
                v |= (uint64_t)(byte & 0x7F) << shift;
                if (!(byte & 0x80))
                    break;
                shift += 7;
                if (shift > 28) {
                    *why = "a record length varint is longer than 5 bytes";
                    return -1;
                }
            }
            int64_t length = (int64_t)(v >> 1) ^ -(int64_t)(v & 1);
            if (length < 0 || length > end - pos) {
                *why = "a record runs past the end of its batch";
                return -1;
            }
            pos += length;
        }
        if (pos != end) {
            *why = "the records of a batch do not fill it";
            return -1;
        }
    }
    return 0;
}

static PyObject *record_starts(PyObject *self, PyObject *args)
{
    PyObject *data_obj, *out_obj, *spans_obj, *counts_obj;
    Py_buffer data, out, spans, counts;
    const char *why = NULL;
    int rc;

    if (!PyArg_ParseTuple(args, "OOOO", &data_obj, &out_obj, &spans_obj, &counts_obj))
        return NULL;
    if (PyObject_GetBuffer(data_obj, &data, PyBUF_SIMPLE) < 0)
        return NULL;
    if (PyObject_GetBuffer(out_obj, &out, PyBUF_WRITABLE) < 0) {
        PyBuffer_Release(&data);
        return NULL;
    }
    if (PyObject_GetBuffer(spans_obj, &spans, PyBUF_SIMPLE) < 0) {
        PyBuffer_Release(&data);
        PyBuffer_Release(&out);
        return NULL;
    }
    if (PyObject_GetBuffer(counts_obj, &counts, PyBUF_SIMPLE) < 0) {
        PyBuffer_Release(&data);
        PyBuffer_Release(&out);
        PyBuffer_Release(&spans);
        return NULL;
    }
    if (spans.len != 2 * counts.len || counts.len % 8 != 0 || out.len % 8 != 0) {
        why = "spans must be int64 pairs, one per int64 count, and out an int64 buffer";
        rc = -1;
    } else {
        Py_BEGIN_ALLOW_THREADS
        rc = walk((const uint8_t *)data.buf, data.len, (int64_t *)out.buf, out.len / 8, (const int64_t *)spans.buf,
                  (const int64_t *)counts.buf, counts.len / 8, &why);
        Py_END_ALLOW_THREADS
    }
    PyBuffer_Release(&data);
    PyBuffer_Release(&out);
    PyBuffer_Release(&spans);
    PyBuffer_Release(&counts);
    if (rc < 0) {
        PyErr_SetString(PyExc_ValueError, why);
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"record_starts", record_starts, METH_VARARGS, "Positions of every record's length varint (see _walk.c)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_walk", NULL, -1, methods};

PyMODINIT_FUNC PyInit__walk(void) { return PyModule_Create(&module); }
