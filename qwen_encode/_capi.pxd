# CPython's C API that the compiled modules call and Cython's own declarations lack (cimported
# by name, resolved when setup.py compiles; as Python that import fails and nothing calls these).
cdef extern from "Python.h":
    # Whether the garbage collector tracks an object (gc.is_tracked).
    bint PyObject_GC_IsTracked(object op)
    # Leave a container out of the collector's passes, as the collector itself does with a tuple
    # of untracked objects at its first pass over it.
    void PyObject_GC_UnTrack(object op)
