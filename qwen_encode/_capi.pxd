# CPython's C API that the compiled modules call and Cython's own declarations lack (cimported
# by name, resolved when setup.py compiles; as Python that import fails and nothing calls these).
cdef extern from "Python.h":
    # Whether the garbage collector tracks an object (gc.is_tracked).
    bint PyObject_GC_IsTracked(object op)
    # Leave a container out of the collector's passes, as the collector itself does with a tuple
    # of untracked objects at its first pass over it.
    void PyObject_GC_UnTrack(object op)


cdef extern from *:
    """
    #include "structmember.h"
    /* Set the field that a __slots__ member descriptor names, as its __set__ does, without
       making a bound method-wrapper and calling it (a frozen value's fields are set so). */
    static int qe_set_slot(PyObject *descr, PyObject *obj, PyObject *value) {
        return PyMember_SetOne((char *)obj, ((PyMemberDescrObject *)descr)->d_member, value);
    }
    """
    # ``descr`` must be a member descriptor of ``type(obj)`` (a __slots__ entry): checked by
    # the caller once, at import.
    int qe_set_slot(object descr, object obj, object value) except -1


cdef extern from *:
    """
    /* Whether a str holds a lone surrogate (U+D800..U+DFFF), which no UTF-8 encoder takes. A
       one-byte string cannot; a wider one is scanned without an early exit per character, a
       loop the compiler vectorises (Cython's loop over a str's characters reads each through
       a switch on the string's kind). */
    static int qe_has_surrogate(PyObject *text) {
        Py_ssize_t n, i;
        unsigned found = 0;
    #if PY_VERSION_HEX < 0x030C0000
        if (PyUnicode_READY(text) < 0) {  /* a legacy str (before 3.12) that cannot be read */
            PyErr_Clear();
            return 1;  /* as if bad: the general path reads it, and names what is wrong */
        }
    #endif
        n = PyUnicode_GET_LENGTH(text);
        if (PyUnicode_KIND(text) == PyUnicode_2BYTE_KIND) {
            const Py_UCS2 *d = PyUnicode_2BYTE_DATA(text);
            for (i = 0; i < n; i++) found |= (d[i] & 0xF800) == 0xD800;
        } else if (PyUnicode_KIND(text) == PyUnicode_4BYTE_KIND) {
            const Py_UCS4 *d = PyUnicode_4BYTE_DATA(text);
            for (i = 0; i < n; i++) found |= (d[i] & 0xFFFFF800u) == 0xD800;
        }
        return found != 0;
    }
    """
    # ``text``: a str, or an instance of a subclass of str (checked by the caller).
    bint qe_has_surrogate(object text)


# ``values[i]`` into the slot ``fields[i]`` of ``obj`` (``qe_set_slot``), for each field: how a
# frozen value with slots is made in one call.
cdef inline int qe_set_slots(object obj, tuple fields, tuple values) except -1:
    cdef Py_ssize_t i
    for i in range(len(fields)):
        qe_set_slot(fields[i], obj, values[i])
    return 0
