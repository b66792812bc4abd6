/* The records of one Kafka record batch (magic 2) built straight into the consumer's objects.
 *
 * Why C: at 100-byte records the asyncio consumer's CPU is its per-record Python work. With
 * aiokafka's C reader each record was built twice -- aiokafka's record object, then six attribute
 * reads and the ShareRecord -- about 0.8 us a record on the benchmark machine, more than a
 * librdkafka consumer spends on a record in all. This walk reads each record's fields from the
 * batch and makes the one object the application asked for (and the offset list the ack books
 * need), nothing in between. The batch header, the CRC check and decompression stay in Python
 * (records.py): they cost per batch, not per record. records.py keeps the aiokafka path for a
 * package built without a C compiler; the tests compare the two.
 *
 * build(data, pos, end, count, base_offset, base_timestamp, max_timestamp, log_append_time,
 *       topic, partition, ranges, i, key_de, value_de, record_type, out, offsets) -> int
 *
 * data[pos:end] is the batch's (uncompressed) record section holding `count` records. ranges is a
 * list of (first, last, delivery_count) tuples sorted by offset, i the one to start at. Each record
 * inside a range is appended to `out` as record_type(topic, partition, offset, timestamp,
 * timestamp_type, key, value, headers, delivery_count) and its offset to `offsets`; records before
 * the range are someone else's and skipped. Returns the index of the range the next batch starts
 * at: len(ranges) once a record lies past the last one (the caller stops there). Raises
 * ValueError for bytes that are not `count` well-formed records filling the section exactly.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

typedef struct {
    const uint8_t *p;
    Py_ssize_t pos, end;
    const char *why;
} Reader;

/* An unsigned LEB128 of at most `max_bytes` bytes, zigzag-decoded. */
static int read_zigzag(Reader *r, int max_bytes, int64_t *out)
{
    uint64_t v = 0;
    for (int n = 0; n < max_bytes; n++) {
        if (r->pos >= r->end) {
            r->why = "a record runs past its end";
            return -1;
        }
        uint8_t byte = r->p[r->pos++];
        v |= (uint64_t)(byte & 0x7F) << (7 * n);
        if (!(byte & 0x80)) {
            *out = (int64_t)(v >> 1) ^ -(int64_t)(v & 1);
            return 0;
        }
    }
    r->why = "a varint is too long";
    return -1;
}

/* A length-prefixed field: *len -1 is null; otherwise *start is where its bytes begin. */
static int read_field(Reader *r, Py_ssize_t *start, int64_t *len)
{
    if (read_zigzag(r, 5, len) < 0)
        return -1;
    if (*len < -1) {
        r->why = "a field has a negative length";
        return -1;
    }
    *start = r->pos;
    if (*len > 0) {
        if (*len > r->end - r->pos) {
            r->why = "a field runs past its record";
            return -1;
        }
        r->pos += (Py_ssize_t)*len;
    }
    return 0;
}

static PyObject *field_bytes(const uint8_t *p, Py_ssize_t start, int64_t len)
{
    if (len < 0)
        Py_RETURN_NONE;
    return PyBytes_FromStringAndSize((const char *)p + start, (Py_ssize_t)len);
}

/* key or value as the application asked: the deserializer's result, or the bytes. */
static PyObject *field_object(const uint8_t *p, Py_ssize_t start, int64_t len, PyObject *de)
{
    PyObject *raw = field_bytes(p, start, len);
    if (raw == NULL || de == Py_None)
        return raw;
    PyObject *out = PyObject_CallOneArg(de, raw);
    Py_DECREF(raw);
    return out;
}

static PyObject *read_headers(Reader *r, int64_t n)
{
    if (n == 0)
        return PyTuple_New(0); /* the shared empty tuple */
    if (n < 0 || n > r->end - r->pos) { /* each header takes at least two bytes */
        r->why = "a record has an impossible header count";
        return NULL;
    }
    PyObject *tuple = PyTuple_New((Py_ssize_t)n);
    if (tuple == NULL)
        return NULL;
    for (int64_t h = 0; h < n; h++) {
        Py_ssize_t ks, vs;
        int64_t kl, vl;
        if (read_field(r, &ks, &kl) < 0 || read_field(r, &vs, &vl) < 0) {
            Py_DECREF(tuple);
            return NULL;
        }
        if (kl < 0) {
            r->why = "a header has a null key";
            Py_DECREF(tuple);
            return NULL;
        }
        PyObject *key = PyUnicode_DecodeUTF8((const char *)r->p + ks, (Py_ssize_t)kl, "strict");
        PyObject *value = key ? field_bytes(r->p, vs, vl) : NULL;
        PyObject *pair = value ? PyTuple_Pack(2, key, value) : NULL;
        Py_XDECREF(key);
        Py_XDECREF(value);
        if (pair == NULL) {
            Py_DECREF(tuple);
            return NULL;
        }
        PyTuple_SET_ITEM(tuple, (Py_ssize_t)h, pair);
    }
    return tuple;
}

/* ranges[i] as three integers; 0 or -1 with an exception set. */
static int range_at(PyObject *ranges, Py_ssize_t i, int64_t *first, int64_t *last, PyObject **count)
{
    PyObject *t = PyList_GET_ITEM(ranges, i);
    if (!PyTuple_Check(t) || PyTuple_GET_SIZE(t) != 3) {
        PyErr_SetString(PyExc_TypeError, "ranges must hold (first, last, delivery_count) tuples");
        return -1;
    }
    *first = PyLong_AsLongLong(PyTuple_GET_ITEM(t, 0));
    *last = PyLong_AsLongLong(PyTuple_GET_ITEM(t, 1));
    *count = PyTuple_GET_ITEM(t, 2);
    return PyErr_Occurred() ? -1 : 0;
}

static PyObject *build(PyObject *self, PyObject *args)
{
    PyObject *data_obj, *topic, *partition, *ranges, *key_de, *value_de, *record_type, *out, *offsets;
    Py_ssize_t pos, end, count, i;
    long long base_offset, base_timestamp, max_timestamp;
    int log_append_time;
    Py_buffer data;

    if (!PyArg_ParseTuple(args, "OnnnLLLpOOO!nOOOO!O!", &data_obj, &pos, &end, &count, &base_offset,
                          &base_timestamp, &max_timestamp, &log_append_time, &topic, &partition,
                          &PyList_Type, &ranges, &i, &key_de, &value_de, &record_type, &PyList_Type, &out,
                          &PyList_Type, &offsets))
        return NULL;
    if (PyObject_GetBuffer(data_obj, &data, PyBUF_SIMPLE) < 0)
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(ranges);
    Reader r = {(const uint8_t *)data.buf, pos, end, NULL};
    PyObject *ts_type = PyLong_FromLong(log_append_time ? 1 : 0);
    PyObject *delivery = NULL;
    /* Records of a batch often share a timestamp (a producer stamps in milliseconds; every one with
     * LogAppendTime): they share one integer object, an allocation and a free less per record. */
    PyObject *ts = NULL;
    int64_t ts_value = 0;
    int64_t first = 0, last = -1;
    int failed = ts_type == NULL;

    if (!failed && (pos < 0 || end > data.len || pos > end || count < 0)) {
        r.why = "the record section does not fit its buffer";
        failed = 1;
    }
    if (!failed && i < n && range_at(ranges, i, &first, &last, &delivery) < 0)
        failed = 1;
    for (Py_ssize_t k = 0; !failed && k < count && i < n; k++) {
        int64_t length, ts_delta, offset_delta, hcount;
        Py_ssize_t ks, vs;
        int64_t kl, vl;
        if (read_zigzag(&r, 5, &length) < 0) {
            failed = 1;
            break;
        }
        if (length < 1 || length > r.end - r.pos) {
            r.why = "a record runs past its batch";
            failed = 1;
            break;
        }
        Reader rec = {r.p, r.pos + 1, r.pos + (Py_ssize_t)length, NULL}; /* past the attributes byte */
        r.pos = rec.end;
        if (read_zigzag(&rec, 10, &ts_delta) < 0 || read_zigzag(&rec, 5, &offset_delta) < 0) {
            r.why = rec.why;
            failed = 1;
            break;
        }
        /* unsigned sums: corrupt deltas must not overflow a signed integer (undefined in C) */
        int64_t offset = (int64_t)((uint64_t)base_offset + (uint64_t)offset_delta);
        while (offset > last) {
            if (++i == n)
                break;
            if (range_at(ranges, i, &first, &last, &delivery) < 0) {
                failed = 1;
                break;
            }
        }
        if (failed || i == n)
            break;
        if (offset < first)
            continue; /* acquired by another member: the broker sends whole batches */
        if (read_field(&rec, &ks, &kl) < 0 || read_field(&rec, &vs, &vl) < 0 || read_zigzag(&rec, 5, &hcount) < 0) {
            r.why = rec.why;
            failed = 1;
            break;
        }
        PyObject *headers = read_headers(&rec, hcount);
        if (headers != NULL && rec.pos != rec.end) {
            rec.why = "a record has bytes past its last header";
            Py_CLEAR(headers);
        }
        if (headers == NULL) {
            r.why = rec.why;
            failed = 1;
            break;
        }
        PyObject *key = field_object(r.p, ks, kl, key_de);
        PyObject *value = key ? field_object(r.p, vs, vl, value_de) : NULL;
        PyObject *off = PyLong_FromLongLong(offset);
        int64_t stamp = log_append_time ? max_timestamp : (int64_t)((uint64_t)base_timestamp + (uint64_t)ts_delta);
        if (ts == NULL || stamp != ts_value) {
            Py_XDECREF(ts);
            ts = PyLong_FromLongLong(stamp);
            ts_value = stamp;
        }
        PyObject *record = NULL;
        if (value && off && ts) {
            PyObject *fields[9] = {topic, partition, off, ts, ts_type, key, value, headers, delivery};
            record = PyObject_Vectorcall(record_type, fields, 9, NULL);
        }
        if (record == NULL || PyList_Append(out, record) < 0 || PyList_Append(offsets, off) < 0)
            failed = 1;
        Py_XDECREF(record);
        Py_XDECREF(off);
        Py_XDECREF(value);
        Py_XDECREF(key);
        Py_DECREF(headers);
    }
    /* Every record read whole: the section must hold exactly `count` of them (unless the walk
     * stopped early past the last range, where the rest is not read). */
    if (!failed && i < n && r.pos != r.end) {
        r.why = "the records of a batch do not fill it";
        failed = 1;
    }
    Py_XDECREF(ts);
    Py_XDECREF(ts_type);
    PyBuffer_Release(&data);
    if (failed) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, r.why ? r.why : "malformed record batch");
        return NULL;
    }
    return PyLong_FromSsize_t(i);
}

static PyMethodDef methods[] = {
    {"build", build, METH_VARARGS, "The records of one batch's record section (see _records.c)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_records", NULL, -1, methods};

PyMODINIT_FUNC PyInit__records(void) { return PyModule_Create(&module); }
