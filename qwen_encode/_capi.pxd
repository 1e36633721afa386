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
