# Cython's types for protocol_rows.py, compiled at install time (setup.py): the shared tuples of
# a message index as C fields, the builders' lists and indices as C types, and the helpers as C
# calls. Only what is named here changes; uncompiled, protocol_rows.py runs as it reads.
import cython

cdef class _Shared:
    cdef readonly tuple header_parts
    cdef readonly tuple r_assistant
    cdef readonly tuple r_call_close
    cdef readonly tuple r_call_open
    cdef readonly tuple r_close_t
    cdef readonly tuple r_close_u
    cdef readonly tuple r_nl_t
    cdef readonly tuple r_nl_u
    cdef readonly tuple r_nlnl_t
    cdef readonly tuple r_nlnl_u
    cdef readonly tuple r_open
    cdef readonly tuple r_response_close
    cdef readonly tuple r_response_open
    cdef readonly tuple r_think_close
    cdef readonly tuple r_think_open
    cdef readonly tuple r_user


@cython.locals(
    i=Py_ssize_t, last=Py_ssize_t, role=str, table=list, keep=bint, opens=bint, closes=bint
)
cpdef bint _render_turns(
    list runs, list pieces, list rows, bint preserve_thinking, Py_ssize_t last_query
) except -1
cpdef object _user(list runs, str text, Py_ssize_t i, _Shared s)
cpdef object _tool(list runs, str text, Py_ssize_t i, bint opens, bint closes, _Shared s)
@cython.locals(thought=str, run=str, trained=bint)
cpdef bint _assistant(
    list runs,
    list pieces,
    str text,
    object reasoning,
    tuple calls,
    Py_ssize_t i,
    bint keep_reasoning,
    _Shared s,
) except -1
@cython.locals(j=Py_ssize_t, name=str, texts=list, arguments=dict)
cpdef bint _calls(list runs, list pieces, object calls, Py_ssize_t i, _Shared s) except -1
cpdef bint _bad(object text) except -1
@cython.locals(rows=list, index=Py_ssize_t)
cpdef object _read(list messages, bint add_generation_prompt)
@cython.locals(index=Py_ssize_t, role=str, text=str)
cpdef Py_ssize_t _last_query(list rows) except -2
cdef bint _COMPILED
cdef tuple _kept(tuple item)
cdef tuple _kept_if_plain(tuple item)
