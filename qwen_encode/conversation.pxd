# Cython's types for conversation.py, compiled at install time (setup.py): the check of a plain
# call name as a C loop over its characters, a plain message's fields read as a dict's. Only what
# is named here changes; uncompiled, conversation.py runs as it reads.
import cython

cdef bint _NAMES_IN_ONE_PASS


@cython.locals(ch=Py_UCS4)
cpdef bint _plain_name(str name) except -1


@cython.locals(fields=dict, others=Py_ssize_t)
cpdef object _plain_parts(object message)
